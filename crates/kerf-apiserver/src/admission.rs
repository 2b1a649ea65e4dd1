//! What the API server's create strategies fill in for kinds whose objects clients create bare:
//! a Namespace is `Active`, carries the `kubernetes.io/metadata.name` label naming it, and has the
//! `kubernetes` finalizer in its spec (the namespace controller's: the Namespace's deletion waits
//! until what is in it is gone, see `cluster::namespaces`); a Pod a client creates
//! starts `Pending`, with the QoS class its containers' resources give it.

use k8s_openapi::api::core::v1::{Namespace, NamespaceSpec, NamespaceStatus};
use serde_json::{Value, json};

/// The label every Namespace carries, naming it.
pub const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// Fills in a new Namespace as the API server does.
pub fn namespace(ns: &mut Namespace) {
    let name = ns.metadata.name.clone().unwrap_or_default();
    ns.metadata.labels.get_or_insert_with(Default::default).insert(NAMESPACE_NAME_LABEL.to_string(), name);
    let spec = ns.spec.get_or_insert_with(NamespaceSpec::default);
    if spec.finalizers.as_ref().is_none_or(Vec::is_empty) {
        spec.finalizers = Some(vec!["kubernetes".to_string()]);
    }
    ns.status = Some(NamespaceStatus { phase: Some("Active".to_string()), ..NamespaceStatus::default() });
}

/// A client's new Pod (as JSON) without a phase: `Pending`, and its QoS class unless it has one.
pub fn pod(body: &mut Value) {
    let Some(obj) = body.as_object_mut() else { return };
    let qos = qos_class(obj.get("spec"));
    let status = obj.entry("status").or_insert_with(|| json!({}));
    let Some(status) = status.as_object_mut() else { return };
    status.entry("phase").or_insert_with(|| json!("Pending"));
    status.entry("qosClass").or_insert_with(|| json!(qos));
}

/// The QoS class of a pod spec: `BestEffort` without requests or limits, `Guaranteed` when every
/// container limits CPU and memory to what it requests (a request left out is its limit), else
/// `Burstable`.
fn qos_class(spec: Option<&Value>) -> &'static str {
    let containers: Vec<&Value> = ["initContainers", "containers"]
        .iter()
        .filter_map(|f| spec.and_then(|s| s.get(*f)).and_then(Value::as_array))
        .flatten()
        .collect();
    let of = |c: &Value, part: &str, r: &str| c.pointer(&format!("/resources/{part}/{r}")).cloned();
    let mut any = false;
    let mut guaranteed = true;
    for c in &containers {
        for r in ["cpu", "memory"] {
            let (req, lim) = (of(c, "requests", r), of(c, "limits", r));
            any |= req.is_some() || lim.is_some();
            guaranteed &= lim.is_some() && req.as_ref().is_none_or(|q| Some(q) == lim.as_ref());
        }
    }
    match (any, guaranteed) {
        (false, _) => "BestEffort",
        (true, true) => "Guaranteed",
        (true, false) => "Burstable",
    }
}

#[cfg(test)]
mod tests {
    use kerf_api::clock::ManualClock;
    use serde_json::{Value, json};

    use crate::cluster::SimCluster;
    use crate::kinds;
    use crate::rest::Rest;

    #[test]
    fn a_new_namespace_is_active_labelled_with_its_name_and_finalized_by_kubernetes() {
        let r = Rest::new(std::sync::Arc::new(SimCluster::new(ManualClock::new(), 1)));
        let ns = r.create(kinds::by_kind("Namespace").unwrap(), None, json!({"metadata": {"name": "team-a"}})).unwrap();
        assert_eq!(ns["status"]["phase"], "Active");
        assert_eq!(ns["metadata"]["labels"]["kubernetes.io/metadata.name"], "team-a");
        assert_eq!(ns["spec"]["finalizers"], json!(["kubernetes"]));
    }

    #[test]
    fn a_clients_new_pod_is_pending_with_the_qos_class_of_its_resources() {
        let pod = |resources: Value| {
            let mut p = json!({"spec": {"containers": [{"name": "c", "resources": resources}]}});
            super::pod(&mut p);
            (p["status"]["phase"].clone(), p["status"]["qosClass"].clone())
        };
        assert_eq!(pod(json!({})), (json!("Pending"), json!("BestEffort")));
        assert_eq!(pod(json!({"requests": {"cpu": "1"}})).1, "Burstable");
        assert_eq!(pod(json!({"limits": {"cpu": "1", "memory": "1Gi"}})).1, "Guaranteed");
        let equal = json!({"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}});
        assert_eq!(pod(equal).1, "Guaranteed");
        let mut running = json!({"spec": {}, "status": {"phase": "Running"}});
        super::pod(&mut running);
        assert_eq!(running["status"]["phase"], "Running", "a phase given is kept");
    }
}
