//! kube-scheduler's VolumeBinding pre-filter, as far as kerf models storage: a pod that mounts a
//! PersistentVolumeClaim that does not exist, or one that is unbound and names a StorageClass
//! that does not exist, can go to no node at all. kerf's provisioner launches nothing for such a
//! pod and the simulated kube-scheduler binds it nowhere; both ask [`unresolvable_claims`].

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kerf_api::SlimPod;

/// Why a claim the pod mounts keeps it off every node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimProblem {
    /// The PersistentVolumeClaim does not exist.
    NotFound,
    /// It is bound to no volume and its StorageClass (named here) does not exist, so nothing
    /// will ever provision one (kube-scheduler treats it as an unbound immediate claim).
    UnknownStorageClass(String),
}

/// One PersistentVolumeClaim of a pod that no node can satisfy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnresolvableClaim {
    pub namespace: String,
    pub name: String,
    pub problem: ClaimProblem,
}

impl UnresolvableClaim {
    /// `namespace/name`, the key the scheduling input's volume maps use.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// kerf's explanation, naming the claim, its namespace and what is missing.
    pub fn explain(&self) -> String {
        let (ns, name) = (&self.namespace, &self.name);
        match &self.problem {
            ClaimProblem::NotFound => format!("persistentvolumeclaim \"{name}\" not found in namespace {ns}"),
            ClaimProblem::UnknownStorageClass(class) => format!(
                "persistentvolumeclaim \"{name}\" in namespace {ns} is unbound and its storageclass \"{class}\" does not exist"
            ),
        }
    }

    /// What kube-scheduler's VolumeBinding plugin says when it refuses the pod.
    pub fn scheduler_reason(&self) -> String {
        match &self.problem {
            ClaimProblem::NotFound => format!("persistentvolumeclaim \"{}\" not found", self.name),
            ClaimProblem::UnknownStorageClass(_) => "pod has unbound immediate PersistentVolumeClaims".to_string(),
        }
    }
}

/// The PersistentVolumeClaims `pod` mounts that keep it off every node, in volume order, each
/// claim once. `claim(namespace, name)` looks a claim up; `class_exists(name)` says whether a
/// StorageClass exists.
pub fn unresolvable_claims<'c>(
    pod: &SlimPod,
    claim: impl Fn(&str, &str) -> Option<&'c PersistentVolumeClaim>,
    class_exists: impl Fn(&str) -> bool,
) -> Vec<UnresolvableClaim> {
    let ns = crate::pod::namespace(pod);
    let volumes = pod.spec.as_ref().and_then(|s| s.volumes.as_ref());
    let mut out: Vec<UnresolvableClaim> = Vec::new();
    for source in volumes.into_iter().flatten().filter_map(|v| v.persistent_volume_claim.as_ref()) {
        let name = &source.claim_name;
        if out.iter().any(|u| &u.name == name) {
            continue;
        }
        let problem = match claim(ns, name) {
            None => Some(ClaimProblem::NotFound),
            Some(pvc) => {
                let spec = pvc.spec.as_ref();
                let bound = spec.and_then(|s| s.volume_name.as_deref()).is_some_and(|v| !v.is_empty());
                spec.and_then(|s| s.storage_class_name.as_deref())
                    .filter(|class| !bound && !class.is_empty() && !class_exists(class))
                    .map(|class| ClaimProblem::UnknownStorageClass(class.to_string()))
            }
        };
        if let Some(problem) = problem {
            out.push(UnresolvableClaim { namespace: ns.to_string(), name: name.clone(), problem });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PersistentVolumeClaimSpec, PersistentVolumeClaimVolumeSource};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use kerf_api::{PodShape, SlimPodSpec, SlimVolume};

    fn pod(claims: &[&str]) -> SlimPod {
        SlimPod {
            metadata: ObjectMeta { name: Some("p".into()), namespace: Some("apps".into()), ..Default::default() }
                .into(),
            spec: Some(SlimPodSpec::from(PodShape {
                volumes: Some(
                    claims
                        .iter()
                        .map(|c| SlimVolume {
                            name: format!("v-{c}"),
                            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                                claim_name: c.to_string(),
                                read_only: None,
                            }),
                            ..Default::default()
                        })
                        .collect(),
                ),
                ..Default::default()
            })),
            status: None,
        }
    }

    fn pvc(class: Option<&str>, volume: Option<&str>) -> PersistentVolumeClaim {
        PersistentVolumeClaim {
            spec: Some(PersistentVolumeClaimSpec {
                storage_class_name: class.map(str::to_string),
                volume_name: volume.map(str::to_string),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn missing_claims_and_unbound_claims_of_missing_classes_are_unresolvable_once_each() {
        let unbound_gone = pvc(Some("gone"), None);
        let bound_gone = pvc(Some("gone"), Some("pv-1"));
        let unbound_known = pvc(Some("gp3"), None);
        let no_class = pvc(None, None);
        let lookup = |ns: &str, name: &str| {
            assert_eq!(ns, "apps");
            match name {
                "unbound-gone" => Some(&unbound_gone),
                "bound-gone" => Some(&bound_gone),
                "unbound-known" => Some(&unbound_known),
                "no-class" => Some(&no_class),
                _ => None,
            }
        };
        let p = pod(&["missing", "bound-gone", "unbound-known", "no-class", "unbound-gone", "missing"]);
        let found = unresolvable_claims(&p, lookup, |c| c == "gp3");
        assert_eq!(
            found,
            vec![
                UnresolvableClaim { namespace: "apps".into(), name: "missing".into(), problem: ClaimProblem::NotFound },
                UnresolvableClaim {
                    namespace: "apps".into(),
                    name: "unbound-gone".into(),
                    problem: ClaimProblem::UnknownStorageClass("gone".into())
                },
            ]
        );
        assert_eq!(found[0].key(), "apps/missing");
        assert_eq!(found[0].scheduler_reason(), "persistentvolumeclaim \"missing\" not found");
        assert_eq!(found[0].explain(), "persistentvolumeclaim \"missing\" not found in namespace apps");
        assert_eq!(found[1].scheduler_reason(), "pod has unbound immediate PersistentVolumeClaims");
        assert!(found[1].explain().contains("storageclass \"gone\" does not exist"));
        assert!(unresolvable_claims(&pod(&["unbound-known"]), lookup, |c| c == "gp3").is_empty());
    }
}
