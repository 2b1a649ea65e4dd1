//! A stand-in for the workload controllers the simulator does not model otherwise (StatefulSets
//! and Jobs), as far as disruption needs them: a pod one of them owns that goes away (evicted by
//! a drain, collected with its node, deleted) is created again, unbound, as its controller would
//! (a StatefulSet's under the same name, a Job's under a new one), so a what-if on a cluster
//! snapshot moves such pods instead of losing them. A pod that went with its namespace is not:
//! its owner went too.

use k8s_openapi::api::core::v1::{Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use kerf_api::cluster::AnyObject;

use kerf_apiserver::SimCluster;

/// Owners whose pods this stand-in brings back.
const KINDS: &[&str] = &["StatefulSet", "Job"];

#[derive(Debug, Default)]
pub struct OwnedPods {
    /// Pods to create again on the next run.
    pending: Vec<Pod>,
}

impl OwnedPods {
    /// A pod was deleted (in the store's form: whole, or slim when the store keeps pods so and
    /// the replacement has what the slim form kept): if a StatefulSet or Job owns it, its
    /// replacement is due.
    pub fn pod_deleted(&mut self, pod: &AnyObject) {
        match pod {
            AnyObject::Pod(p) => self.whole_pod_deleted(p),
            AnyObject::SlimPod(p) => match p.whole() {
                Ok(whole) => self.whole_pod_deleted(&whole),
                Err(e) => tracing::warn!(pod = ?p.metadata.name, error = %e, "cannot read a deleted pod whole"),
            },
            _ => {}
        }
    }

    fn whole_pod_deleted(&mut self, pod: &Pod) {
        let Some(owner) = pod
            .metadata
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.controller == Some(true) && KINDS.contains(&o.kind.as_str()))
        else {
            return;
        };
        let stateful = owner.kind == "StatefulSet";
        let m = &pod.metadata;
        let metadata = ObjectMeta {
            name: if stateful { m.name.clone() } else { None },
            generate_name: if stateful { None } else { Some(format!("{}-", owner.name)) },
            namespace: m.namespace.clone(),
            labels: m.labels.clone(),
            annotations: m.annotations.clone(),
            owner_references: m.owner_references.clone(),
            ..ObjectMeta::default()
        };
        let spec = pod.spec.clone().map(|s| PodSpec { node_name: None, ..s });
        self.pending.push(Pod { metadata, spec, status: None });
    }

    /// Namespace `ns` was deleted, and its pods' owners with it: none of its pods comes back.
    pub fn namespace_deleted(&mut self, ns: &str) {
        self.pending.retain(|p| p.metadata.namespace.as_deref() != Some(ns));
    }

    pub fn has_work(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Creates the replacements due.
    pub fn run(&mut self, cluster: &SimCluster) {
        for pod in std::mem::take(&mut self.pending) {
            if let Err(e) = cluster.create_named(pod) {
                tracing::warn!(error = %e, "cannot create a StatefulSet's or Job's pod again");
            }
        }
    }
}
