//! How the store keeps pods. A served cluster keeps them whole: a client reads back every field
//! it wrote. A cluster nobody reads over HTTP (`kerf simulate`) keeps them in the form the
//! controllers keep them ([`SlimPod`]): everything that reads its pods (the controllers, the
//! simulator's stand-ins, the Eviction API's budgets) reads that form, and where a whole pod
//! costs kilobytes for every version, a slim one shares its shape, labels and owners with its
//! replicas and with the controllers' own copy.
//!
//! A pod takes the store's form as it comes in, after admission (priority, RuntimeClass
//! overhead), so every reader downstream sees one form.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kerf_api::SlimPod;
use kerf_api::cluster::{AnyObject, ApiError};

use crate::stored::{Stored, typed};

/// The form the store keeps pods in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum PodForm {
    /// Every field, as written.
    #[default]
    Whole,
    /// What the controllers keep ([`SlimPod`]).
    Kept,
}

impl PodForm {
    /// `obj` in this form (anything but a pod as it is). A slim pod cannot become whole again:
    /// it no longer has what its writer gave it, so a whole store refuses one.
    pub(crate) fn keep(self, obj: Stored) -> Result<Stored, ApiError> {
        match (self, obj) {
            (PodForm::Kept, Stored::Typed(AnyObject::Pod(p))) => {
                Ok(Stored::Typed(AnyObject::SlimPod(Arc::new(SlimPod::from(&*p)))))
            }
            (PodForm::Whole, Stored::Typed(AnyObject::SlimPod(p))) => Err(ApiError::Invalid {
                kind: "Pod",
                name: p.metadata.name.clone().unwrap_or_default(),
                message: "a pod is written whole; the controllers' slim form of it keeps only what they read"
                    .to_string(),
            }),
            (_, obj) => Ok(obj),
        }
    }

    /// A new pod admitted (see [`admit`]) and in this form.
    pub(crate) fn admit(
        self,
        obj: Stored,
        classes: Option<&BTreeMap<String, Stored>>,
        runtimes: Option<&BTreeMap<String, Stored>>,
    ) -> Result<Stored, ApiError> {
        let mut whole = match obj {
            Stored::Typed(AnyObject::Pod(p)) => p,
            // Admission reads and writes a whole pod's spec; a slim pod is admitted as one.
            Stored::Typed(AnyObject::SlimPod(p)) if self == PodForm::Kept => {
                Arc::new(p.whole().map_err(|e| ApiError::Invalid {
                    kind: "Pod",
                    name: p.metadata.name.clone().unwrap_or_default(),
                    message: e.to_string(),
                })?)
            }
            other => return self.keep(other),
        };
        admit(Arc::make_mut(&mut whole), classes, runtimes);
        self.keep(Stored::Typed(AnyObject::Pod(whole)))
    }
}

/// The Priority and RuntimeClass admission plugins: a pod naming a priority class gets its value
/// (the built-in `system-node-critical` / `system-cluster-critical` ones, or an applied
/// PriorityClass; without a name, the global default class if one is applied), and a pod naming a
/// RuntimeClass gets that class's pod overhead.
fn admit(pod: &mut Pod, classes: Option<&BTreeMap<String, Stored>>, runtimes: Option<&BTreeMap<String, Stored>>) {
    use k8s_openapi::api::node::v1::RuntimeClass;
    use k8s_openapi::api::scheduling::v1::PriorityClass;
    let Some(spec) = pod.spec.as_mut() else { return };
    if spec.priority.is_none() {
        let class = |name: &str| classes.and_then(|c| c.get(name)).and_then(typed::<PriorityClass>).map(|c| c.value);
        spec.priority = match spec.priority_class_name.as_deref() {
            Some("system-node-critical") => Some(2_000_001_000),
            Some("system-cluster-critical") => Some(2_000_000_000),
            Some(name) => class(name),
            None => classes.and_then(|c| {
                c.values().filter_map(typed::<PriorityClass>).find(|c| c.global_default == Some(true)).map(|c| c.value)
            }),
        };
    }
    if spec.overhead.is_none()
        && let Some(name) = spec.runtime_class_name.as_deref()
        && let Some(rc) = runtimes.and_then(|r| r.get(name)).and_then(typed::<RuntimeClass>)
    {
        spec.overhead = rc.overhead.as_ref().and_then(|o| o.pod_fixed.clone());
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{Container, PodCondition, PodSpec, PodStatus};
    use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
    use k8s_openapi::api::scheduling::v1::PriorityClass;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    use kerf_api::clock::ManualClock;
    use kerf_api::cluster::Patch;
    use serde_json::json;

    use super::*;
    use crate::SimCluster;
    use crate::writes::Part;

    fn web_pod(name: &str) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                namespace: Some("default".to_string()),
                labels: Some([("app".to_string(), "web".to_string())].into()),
                ..ObjectMeta::default()
            },
            spec: Some(PodSpec {
                priority_class_name: Some("high".to_string()),
                node_name: Some("n1".to_string()),
                containers: vec![Container {
                    name: "c".to_string(),
                    image: Some("nginx:1.27".to_string()),
                    ..Container::default()
                }],
                ..PodSpec::default()
            }),
            status: Some(PodStatus {
                phase: Some("Running".to_string()),
                conditions: Some(vec![PodCondition {
                    type_: "Ready".to_string(),
                    status: "True".to_string(),
                    ..PodCondition::default()
                }]),
                ..PodStatus::default()
            }),
        }
    }

    fn stored(c: &SimCluster, name: &str) -> Stored {
        c.get_stored("Pod", Some("default"), name).expect("the pod is stored")
    }

    #[test]
    fn an_unserved_store_keeps_pods_slim_and_admitted_and_serving_makes_them_whole_of_what_they_kept() {
        let c = SimCluster::new(ManualClock::new(), 1);
        c.keep_pods_slim();
        let high = ObjectMeta { name: Some("high".to_string()), ..ObjectMeta::default() };
        c.create_obj(PriorityClass { metadata: high, value: 1000, ..PriorityClass::default() }).unwrap();
        c.create_obj(web_pod("a")).unwrap();

        let Stored::Typed(AnyObject::SlimPod(kept)) = stored(&c, "a") else { panic!("stored whole") };
        assert_eq!(kept.spec.as_ref().and_then(|s| s.priority), Some(1000), "admitted before it was made slim");
        assert!(kept.metadata.uid.is_some() && kept.metadata.creation_timestamp.is_some());
        // Read whole, it has what the slim form kept and nothing else.
        let whole = c.get_obj::<Pod>(Some("default"), "a").unwrap();
        assert_eq!(whole.metadata.uid, kept.metadata.uid);
        assert_eq!(whole.spec.as_ref().and_then(|s| s.node_name.as_deref()), Some("n1"));
        assert_eq!(whole.spec.as_ref().map(|s| s.containers[0].image.clone()), Some(None));

        // A status patch (a controller's nomination) and a metadata patch are written slim.
        let nominate = Patch::Merge(json!({"status": {"nominatedNodeName": "n2"}}));
        let patched = c.patch_obj::<SlimPod>(Some("default"), "a", &nominate, Part::Status).unwrap();
        assert_eq!(patched.status.as_ref().and_then(|s| s.nominated_node_name()), Some("n2"));
        let label = Patch::Merge(json!({"metadata": {"labels": {"tier": "front"}}}));
        c.patch_obj::<Pod>(Some("default"), "a", &label, Part::Main).unwrap();
        let Stored::Typed(AnyObject::SlimPod(kept)) = stored(&c, "a") else { panic!("a patch stored it whole") };
        assert_eq!(kept.metadata.labels.as_ref().and_then(|l| l.get("tier")).map(String::as_str), Some("front"));
        assert_eq!(kept.status.as_ref().and_then(|s| s.nominated_node_name()), Some("n2"));

        // Served, the store keeps pods whole: the one kept before as what it kept, a new one
        // with every field.
        c.enable_serving(10);
        let Stored::Typed(AnyObject::Pod(before)) = stored(&c, "a") else { panic!("still slim once served") };
        assert_eq!(before.metadata.labels.as_ref().and_then(|l| l.get("tier")).map(String::as_str), Some("front"));
        c.create_obj(web_pod("b")).unwrap();
        let b = c.get_obj::<Pod>(Some("default"), "b").unwrap();
        assert_eq!(b.spec.as_ref().and_then(|s| s.containers[0].image.as_deref()), Some("nginx:1.27"));
    }

    #[test]
    fn a_whole_store_refuses_a_slim_pod_naming_it() {
        let c = SimCluster::new(ManualClock::new(), 1);
        let err = c.create_obj(SlimPod::from(&web_pod("a"))).unwrap_err();
        assert!(matches!(&err, ApiError::Invalid { kind: "Pod", name, .. } if name == "a"), "{err}");
        assert!(c.get_stored("Pod", Some("default"), "a").is_none(), "nothing half-written");
    }

    #[test]
    fn eviction_honours_a_disruption_budget_over_pods_kept_slim() {
        let c = SimCluster::new(ManualClock::new(), 1);
        c.keep_pods_slim();
        let mut pod = web_pod("a");
        pod.spec.as_mut().unwrap().priority_class_name = None;
        c.create_obj(pod).unwrap();
        c.create_obj(PodDisruptionBudget {
            metadata: ObjectMeta {
                name: Some("web".to_string()),
                namespace: Some("default".to_string()),
                ..ObjectMeta::default()
            },
            spec: Some(PodDisruptionBudgetSpec {
                min_available: Some(IntOrString::Int(1)),
                selector: Some(LabelSelector {
                    match_labels: Some([("app".to_string(), "web".to_string())].into()),
                    ..LabelSelector::default()
                }),
                ..PodDisruptionBudgetSpec::default()
            }),
            status: None,
        })
        .unwrap();
        let refused = c.evict_pod("default", "a").unwrap_err();
        assert!(matches!(&refused, ApiError::TooManyRequests { name, .. } if name == "default/a"), "{refused}");
        c.delete_obj::<PodDisruptionBudget>(Some("default"), "web").unwrap();
        c.evict_pod("default", "a").unwrap();
        assert!(c.get_stored("Pod", Some("default"), "a").is_none());
    }
}
