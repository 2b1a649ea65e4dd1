//! EBS volume attach limits (docs/design.md, "Volume attach limits"): which
//! PersistentVolumeClaims attach an EBS volume to their pod's node, and how many a pod needs.
//!
//! A node's limit is its allocatable [`ATTACHABLE_VOLUMES_EBS`] (a node or instance type without
//! it has no limit); a pod needs one per distinct claim it mounts whose StorageClass provisions
//! through the EBS CSI driver. The count travels as a resource: the scheduler keeps it as one
//! more column of its dense vectors, kube-scheduler's view as one more entry of a pod's
//! requests, so every fit check, packing choice and consolidation what-if counts it.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::storage::v1::StorageClass;
use kerf_api::{Quantity, ResourceList, SlimPod};

pub use kerf_api::resources::ATTACHABLE_VOLUMES_EBS;

/// The EBS CSI driver's provisioner name.
pub const EBS_CSI_DRIVER: &str = "ebs.csi.aws.com";
/// The in-tree EBS plugin, which Kubernetes migrates to the CSI driver.
pub const EBS_IN_TREE: &str = "kubernetes.io/aws-ebs";

/// The room of a node or instance type that sets no attach limit: larger than any pod asks,
/// small enough that sums of it do not overflow.
pub const NO_LIMIT: i64 = i64::MAX / 4;

/// Whether volumes of `class` attach as EBS volumes.
pub fn is_ebs_class(class: &StorageClass) -> bool {
    class.provisioner == EBS_CSI_DRIVER || class.provisioner == EBS_IN_TREE
}

/// Whether `pvc`'s volume attaches as an EBS volume: its StorageClass (`class(name)`, or
/// `class(None)` for the default class when the claim names none) provisions through EBS. A
/// claim with an empty class name binds a pre-made volume kerf does not look at.
pub fn claim_attaches_ebs<'c>(
    pvc: &PersistentVolumeClaim,
    class: impl Fn(Option<&str>) -> Option<&'c StorageClass>,
) -> bool {
    let name = pvc.spec.as_ref().and_then(|s| s.storage_class_name.as_deref());
    name != Some("") && class(name).is_some_and(is_ebs_class)
}

/// The StorageClass a claim without `storageClassName` gets, as the DefaultStorageClass admission
/// plugin picks it: among classes annotated as default, the most recently created (then by name).
/// An explicit empty `storageClassName` means "no class" and never reaches here.
pub fn default_storage_class<'a>(classes: impl IntoIterator<Item = &'a StorageClass>) -> Option<&'a StorageClass> {
    const DEFAULT: [&str; 2] =
        ["storageclass.kubernetes.io/is-default-class", "storageclass.beta.kubernetes.io/is-default-class"];
    classes
        .into_iter()
        .filter(|c| {
            c.metadata
                .annotations
                .as_ref()
                .is_some_and(|a| DEFAULT.iter().any(|k| a.get(*k).is_some_and(|v| v == "true")))
        })
        .max_by(|a, b| {
            let created = |c: &StorageClass| c.metadata.creation_timestamp.as_ref().map(|t| t.0);
            created(a).cmp(&created(b)).then_with(|| b.metadata.name.cmp(&a.metadata.name))
        })
}

/// How many EBS volumes `pod` attaches: its distinct claims (`namespace/claim`) found in `ebs`.
/// Cheap for pods without claims, which most are.
pub fn ebs_volume_count(pod: &SlimPod, ebs: &BTreeSet<String>) -> i64 {
    if ebs.is_empty() {
        return 0;
    }
    let Some(volumes) = pod.spec.as_ref().and_then(|s| s.volumes.as_ref()) else { return 0 };
    if !volumes.iter().any(|v| v.persistent_volume_claim.is_some() || v.ephemeral.is_some()) {
        return 0;
    }
    let claims: BTreeSet<String> = crate::pod::volume_claims(pod).into_iter().collect();
    claims.iter().filter(|c| ebs.contains(*c)).count() as i64
}

/// `requests` with `count` EBS volumes, unless they already carry a count.
pub fn with_ebs_volumes(requests: &ResourceList, count: i64) -> ResourceList {
    let mut out = requests.clone();
    if count > 0 && !requests.0.contains_key(ATTACHABLE_VOLUMES_EBS) {
        out.set(ATTACHABLE_VOLUMES_EBS, Quantity::from_units(count));
    }
    out
}

/// kube-scheduler's words for a node without room for the pod's volumes.
pub const MAX_VOLUME_COUNT: &str = "node(s) exceed max volume count";

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(claims: &[&str]) -> SlimPod {
        let volumes: Vec<serde_json::Value> = claims
            .iter()
            .enumerate()
            .map(|(i, c)| serde_json::json!({"name": format!("v{i}"), "persistentVolumeClaim": {"claimName": c}}))
            .collect();
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "db-0", "namespace": "shop"},
            "spec": {"containers": [{"name": "c"}], "volumes": volumes}
        }))
        .unwrap()
    }

    fn class(provisioner: &str) -> StorageClass {
        StorageClass { provisioner: provisioner.to_string(), ..Default::default() }
    }

    #[test]
    fn a_pod_needs_one_attachment_per_distinct_ebs_claim() {
        let ebs: BTreeSet<String> = ["shop/a", "shop/b"].iter().map(|s| s.to_string()).collect();
        assert_eq!(ebs_volume_count(&pod(&["a", "b", "a", "efs"]), &ebs), 2);
        assert_eq!(ebs_volume_count(&pod(&[]), &ebs), 0);
        assert_eq!(ebs_volume_count(&pod(&["a"]), &BTreeSet::new()), 0);
    }

    #[test]
    fn a_claim_attaches_ebs_through_its_class_or_the_default_class() {
        let gp3 = class(EBS_CSI_DRIVER);
        let efs = class("efs.csi.aws.com");
        let claim = |name: Option<&str>| PersistentVolumeClaim {
            spec: Some(k8s_openapi::api::core::v1::PersistentVolumeClaimSpec {
                storage_class_name: name.map(str::to_string),
                ..Default::default()
            }),
            ..Default::default()
        };
        let lookup = |n: Option<&str>| match n {
            Some("gp3") | None => Some(&gp3),
            Some("efs") => Some(&efs),
            _ => None,
        };
        assert!(claim_attaches_ebs(&claim(Some("gp3")), lookup));
        assert!(claim_attaches_ebs(&claim(None), lookup), "the default class is EBS");
        assert!(!claim_attaches_ebs(&claim(Some("efs")), lookup));
        assert!(!claim_attaches_ebs(&claim(Some("")), lookup), "no class: a pre-made volume");
        assert!(is_ebs_class(&class(EBS_IN_TREE)));
    }
}
