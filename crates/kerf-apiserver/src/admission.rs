//! What the API server's create strategies fill in for kinds whose objects clients create bare:
//! a Namespace is `Active`, carries the `kubernetes.io/metadata.name` label naming it, and has the
//! `kubernetes` finalizer in its spec (the namespace controller's; kerf keeps it as written and
//! deletes a Namespace at once, docs/playground.md, "Not supported yet").

use k8s_openapi::api::core::v1::{Namespace, NamespaceSpec, NamespaceStatus};

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

#[cfg(test)]
mod tests {
    use kerf_api::clock::ManualClock;
    use serde_json::json;

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
}
