//! A Namespace's deletion, as the API server and the namespace controller carry it out together:
//! deleting a Namespace that keeps the `kubernetes` finalizer in its spec (every Namespace does,
//! see [`crate::admission::namespace`]) marks it `Terminating`; everything in it is deleted; once
//! nothing is left, the finalizer goes and so does the Namespace. An object kept by its own
//! finalizers keeps the Namespace `Terminating`, its conditions saying what remains, until the
//! object is gone. Meanwhile nothing new is created in it (`403 Forbidden`, `NamespaceTerminating`),
//! as the NamespaceLifecycle admission plugin refuses; that plugin also keeps `default`,
//! `kube-system` and `kube-public` from being deleted at all.
//!
//! The cluster does it in the same step as the DELETE, so no other writer gets in between and a
//! Deployment deleted with its pods makes no new ones.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Namespace, NamespaceCondition, NamespaceStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kerf_api::clock::Timestamp;
use kerf_api::cluster::{AnyObject, ApiError, Object};

use super::{Inner, in_namespace};
use crate::kinds::is_namespaced;
use crate::stored::Stored;
use crate::writes::{ChangeType, Commit, Preconditions};

/// The kind name of Namespaces in the stores.
pub(super) const NAMESPACE: &str = Namespace::KIND;

/// The namespaces the API server never deletes.
const IMMORTAL: [&str; 3] = ["default", "kube-system", "kube-public"];

/// The finalizer the namespace controller removes once the namespace is empty.
const CONTROLLER_FINALIZER: &str = "kubernetes";

/// The object a stored Namespace is, if it is one.
fn namespace_of(s: &Stored) -> Option<&Namespace> {
    match s {
        Stored::Typed(AnyObject::Namespace(n)) => Some(n),
        _ => None,
    }
}

/// Whether the namespace waits for the namespace controller (its spec keeps the finalizer).
fn has_controller_finalizer(ns: &Namespace) -> bool {
    ns.spec.as_ref().and_then(|s| s.finalizers.as_ref()).is_some_and(|f| f.iter().any(|x| x == CONTROLLER_FINALIZER))
}

/// Sets `ns`'s phase to `Terminating` and its conditions to `conditions`.
fn set_terminating(ns: &mut Namespace, conditions: Vec<NamespaceCondition>) {
    let status = ns.status.get_or_insert_with(NamespaceStatus::default);
    status.phase = Some("Terminating".to_string());
    status.conditions = (!conditions.is_empty()).then_some(conditions);
}

/// What is left in a namespace being deleted, as the namespace controller words it in two
/// conditions: the kinds with objects left, and the finalizers holding them.
fn remaining_conditions(left: &[(&'static str, Vec<String>)], now: Timestamp) -> Vec<NamespaceCondition> {
    use std::collections::BTreeMap;
    let mut by_kind: BTreeMap<String, usize> = BTreeMap::new();
    let mut by_finalizer: BTreeMap<&str, usize> = BTreeMap::new();
    for (kind, finalizers) in left {
        let plural = crate::kinds::by_kind(kind).map_or_else(|| kind.to_lowercase(), |k| k.qualified());
        *by_kind.entry(plural).or_default() += 1;
        for f in finalizers {
            *by_finalizer.entry(f.as_str()).or_default() += 1;
        }
    }
    let condition = |type_: &str, reason: &str, message: Option<String>| NamespaceCondition {
        type_: type_.to_string(),
        status: if message.is_some() { "True" } else { "False" }.to_string(),
        reason: Some(if message.is_some() { reason } else { "ContentDeleted" }.to_string()),
        message: Some(
            message.unwrap_or_else(|| "All content successfully deleted, may be waiting on finalization".to_string()),
        ),
        last_transition_time: Some(Time(now)),
    };
    let listed = |counts: Vec<String>| counts.join(", ");
    let content = (!by_kind.is_empty()).then(|| {
        let counts = by_kind.iter().map(|(k, n)| format!("{k} has {n} resource instances")).collect();
        format!("Some resources are remaining: {}", listed(counts))
    });
    let finalizers = (!by_finalizer.is_empty()).then(|| {
        let counts = by_finalizer.iter().map(|(f, n)| format!("{f} in {n} resource instances")).collect();
        format!("Some content in the namespace has finalizers remaining: {}", listed(counts))
    });
    vec![
        condition("NamespaceContentRemaining", "SomeResourcesRemain", content),
        condition("NamespaceFinalizersRemaining", "SomeFinalizersRemain", finalizers),
    ]
}

impl Inner {
    /// Whether namespace `ns` is being deleted.
    pub(super) fn namespace_terminating(&self, ns: &str) -> bool {
        self.stores.get(NAMESPACE).and_then(|s| s.get(ns)).is_some_and(|n| n.meta().deletion_timestamp().is_some())
    }

    /// Refuses a new object of `kind` named `name` in a namespace being deleted.
    pub(super) fn admit_into_namespace(&self, kind: &'static str, ns: &str, name: &str) -> Result<(), ApiError> {
        if self.namespace_terminating(ns) {
            return Err(ApiError::Forbidden {
                kind,
                name: name.to_string(),
                cause: "NamespaceTerminating",
                message: format!("unable to create new content in namespace {ns} because it is being terminated"),
            });
        }
        Ok(())
    }

    /// The namespaced objects in `ns`: kind, name and finalizers of each.
    fn namespace_content(&self, ns: &str) -> Vec<(&'static str, String, Vec<String>)> {
        self.namespace_objects(ns)
            .map(|(kind, o)| (kind, o.meta().name().unwrap_or_default().to_string(), o.meta().finalizers().to_vec()))
            .collect()
    }

    /// Every object in `ns`, with its kind.
    fn namespace_objects<'s>(&'s self, ns: &'s str) -> impl Iterator<Item = (&'static str, &'s Stored)> + 's {
        let stores = self.stores.iter().filter(|(kind, _)| is_namespaced(kind));
        stores.flat_map(move |(kind, store)| in_namespace(store, ns).map(move |o| (*kind, o)))
    }

    /// Stores the Namespace `ns` as the next version of `before`, for watchers to see.
    fn put_namespace(&mut self, ns: Namespace, before: Stored) -> Stored {
        let name = ns.metadata.name.clone().unwrap_or_default();
        let mut stored = Stored::Typed(AnyObject::Namespace(Arc::new(ns)));
        *stored.server_fields().resource_version = Some(self.next_rv());
        self.stores.entry(NAMESPACE).or_default().insert(name, stored.clone());
        self.emit(NAMESPACE, ChangeType::Modified, stored.clone(), Some(before));
        stored
    }

    /// A DELETE of the Namespace `current` (named `name`) that waits for the namespace
    /// controller: marks it `Terminating`, deletes what is in it, and removes it once empty.
    /// Returns its last state; `None` when it does not wait (no finalizer in its spec). The
    /// namespaces every cluster has (`default`, `kube-system`, `kube-public`) are never deleted.
    pub(super) fn delete_namespace(
        &mut self,
        now: Timestamp,
        name: &str,
        current: &Stored,
        commit: Commit,
    ) -> Option<Result<Stored, ApiError>> {
        if IMMORTAL.contains(&name) {
            return Some(Err(ApiError::Forbidden {
                kind: NAMESPACE,
                name: name.to_string(),
                cause: "Forbidden",
                message: "this namespace may not be deleted".to_string(),
            }));
        }
        let ns = namespace_of(current)?;
        if !has_controller_finalizer(ns) {
            return None;
        }
        let mut marked = ns.clone();
        if marked.metadata.deletion_timestamp.is_none() {
            marked.metadata.deletion_timestamp = Some(Time(now));
        }
        set_terminating(&mut marked, Vec::new());
        if commit == Commit::DryRun {
            return Some(Ok(Stored::Typed(AnyObject::Namespace(Arc::new(marked)))));
        }
        if current.meta().deletion_timestamp().is_none() {
            self.put_namespace(marked, current.clone());
        }
        // Everything in it goes, each object as its own DELETE would take it (an object with
        // finalizers is marked and stays).
        self.clearing_namespace = true;
        for (kind, object, _) in self.namespace_content(name) {
            let _ = self.delete(now, kind, Some(name), &object, &Preconditions::default(), Commit::Store);
        }
        self.clearing_namespace = false;
        if let Some(gone) = self.namespace_settled(name) {
            return Some(Ok(gone));
        }
        // What is left, in the Namespace's conditions.
        let left: Vec<(&'static str, Vec<String>)> =
            self.namespace_content(name).into_iter().map(|(kind, _, finalizers)| (kind, finalizers)).collect();
        let before = self.stores.get(NAMESPACE).and_then(|s| s.get(name)).cloned()?;
        let mut ns = namespace_of(&before)?.clone();
        set_terminating(&mut ns, remaining_conditions(&left, now));
        Some(Ok(self.put_namespace(ns, before)))
    }

    /// After an object in namespace `ns` went: once a namespace being deleted is empty, the
    /// namespace controller's finalizer goes, and with it the Namespace unless finalizers of
    /// its own keep it. Returns the Namespace's last state when it changed.
    pub(super) fn namespace_settled(&mut self, ns: &str) -> Option<Stored> {
        if self.clearing_namespace || !self.namespace_terminating(ns) || self.namespace_objects(ns).next().is_some() {
            return None;
        }
        let current = self.stores.get(NAMESPACE)?.get(ns)?.clone();
        let mut done = namespace_of(&current)?.clone();
        if let Some(spec) = done.spec.as_mut() {
            spec.finalizers = None;
        }
        if let Some(status) = done.status.as_mut() {
            status.conditions = None;
        }
        if done.metadata.finalizers.as_ref().is_some_and(|f| !f.is_empty()) {
            return Some(self.put_namespace(done, current));
        }
        let mut stored = Stored::Typed(AnyObject::Namespace(Arc::new(done)));
        *stored.server_fields().resource_version = Some(self.next_rv());
        if let Some(s) = self.stores.get_mut(NAMESPACE) {
            s.remove(ns);
        }
        self.emit(NAMESPACE, ChangeType::Deleted, stored.clone(), None);
        Some(stored)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1::{Namespace, Pod};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use kerf_api::clock::ManualClock;
    use kerf_api::cluster::{AnyObject, ApiError, WatchEvent};

    use crate::SimCluster;
    use crate::stored::{DynamicObject, Stored};
    use crate::writes::{Commit, Preconditions};

    fn meta(namespace: Option<&str>, name: &str) -> ObjectMeta {
        ObjectMeta { name: Some(name.to_string()), namespace: namespace.map(str::to_string), ..Default::default() }
    }

    fn pod(namespace: &str, name: &str) -> Pod {
        Pod { metadata: meta(Some(namespace), name), ..Default::default() }
    }

    /// Namespaces `team` and `other`, each with two pods and a Deployment.
    fn cluster() -> SimCluster {
        let c = SimCluster::new(ManualClock::new(), 1);
        for ns in ["team", "other"] {
            c.create_obj(Namespace { metadata: meta(None, ns), ..Default::default() }).unwrap();
            for p in ["a", "b"] {
                c.create_obj(pod(ns, p)).unwrap();
            }
            let deployment = serde_json::json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "web", "namespace": ns}, "spec": {"replicas": 2}});
            c.apply_dynamic("Deployment", DynamicObject::from_json(deployment).unwrap()).unwrap();
        }
        c
    }

    fn pods_in(c: &SimCluster, ns: &str) -> Vec<String> {
        let pods = c.list_objs::<Pod>().into_iter().filter(|p| p.metadata.namespace.as_deref() == Some(ns));
        pods.filter_map(|p| p.metadata.name).collect()
    }

    fn phase(c: &SimCluster, ns: &str) -> Option<String> {
        c.get_obj::<Namespace>(None, ns)?.status?.phase
    }

    #[test]
    fn deleting_a_namespace_deletes_what_is_in_it_then_the_namespace() {
        let c = cluster();
        c.drain_watch();
        let last = c.delete_stored("Namespace", None, "team", &Preconditions::default()).unwrap();
        assert!(last.meta().deletion_timestamp().is_some());
        assert!(c.get_obj::<Namespace>(None, "team").is_none(), "gone once empty");
        assert!(pods_in(&c, "team").is_empty());
        assert!(c.get_dynamic("Deployment", Some("team"), "web").is_none());
        // The other namespace keeps everything.
        assert_eq!(pods_in(&c, "other"), vec!["a", "b"]);
        assert!(c.get_dynamic("Deployment", Some("other"), "web").is_some());
        assert_eq!(phase(&c, "other").as_deref(), Some("Active"));
        // Watchers see the namespace turn Terminating, its pods go, then the namespace.
        let seen: Vec<String> = c
            .drain_watch()
            .iter()
            .map(|e| match e {
                WatchEvent::Applied(AnyObject::Namespace(n)) => {
                    format!("namespace {}", n.status.as_ref().and_then(|s| s.phase.clone()).unwrap_or_default())
                }
                WatchEvent::Deleted(AnyObject::Namespace(_)) => "namespace deleted".to_string(),
                WatchEvent::Deleted(_) => "pod deleted".to_string(),
                other => format!("{other:?}"),
            })
            .collect();
        assert_eq!(seen, ["namespace Terminating", "pod deleted", "pod deleted", "namespace deleted"]);
    }

    #[test]
    fn an_object_with_finalizers_keeps_its_namespace_terminating_and_closed_until_it_goes() {
        let c = cluster();
        let mut kept = pod("team", "kept");
        kept.metadata.finalizers = Some(vec!["example.com/keep".to_string()]);
        c.create_obj(kept).unwrap();
        c.delete_stored("Namespace", None, "team", &Preconditions::default()).unwrap();
        assert_eq!(phase(&c, "team").as_deref(), Some("Terminating"));
        assert_eq!(pods_in(&c, "team"), vec!["kept"]);
        let ns = c.get_obj::<Namespace>(None, "team").unwrap();
        let conditions: BTreeMap<String, (String, String)> = ns
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .into_iter()
            .map(|c| (c.type_, (c.status, c.message.unwrap_or_default())))
            .collect();
        assert_eq!(
            conditions["NamespaceContentRemaining"],
            ("True".to_string(), "Some resources are remaining: pods has 1 resource instances".to_string())
        );
        assert_eq!(
            conditions["NamespaceFinalizersRemaining"],
            (
                "True".to_string(),
                "Some content in the namespace has finalizers remaining: example.com/keep in 1 resource instances"
                    .to_string()
            )
        );
        // Nothing new goes into it, a dry run included.
        match c.create_obj(pod("team", "late")) {
            Err(ApiError::Forbidden { cause, message, .. }) => {
                assert_eq!(cause, "NamespaceTerminating");
                assert_eq!(message, "unable to create new content in namespace team because it is being terminated");
            }
            other => panic!("expected Forbidden, got {other:?}"),
        }
        assert!(c.create_obj(pod("other", "late")).is_ok(), "other namespaces take new objects");
        // The last finalizer's removal deletes the pod, and the namespace with it.
        let mut last = c.get_obj::<Pod>(Some("team"), "kept").unwrap();
        last.metadata.finalizers = None;
        c.update_obj(last).unwrap();
        assert!(pods_in(&c, "team").is_empty());
        assert!(c.get_obj::<Namespace>(None, "team").is_none());
        // Its name can be used again.
        c.create_obj(Namespace { metadata: meta(None, "team"), ..Default::default() }).unwrap();
        c.create_obj(pod("team", "new")).unwrap();
    }

    #[test]
    fn the_namespaces_every_cluster_has_are_never_deleted() {
        let c = cluster();
        for ns in ["default", "kube-system", "kube-public"] {
            if c.get_obj::<Namespace>(None, ns).is_none() {
                c.create_obj(Namespace { metadata: meta(None, ns), ..Default::default() }).unwrap();
            }
            c.create_obj(pod(ns, "p")).unwrap();
            for commit in [Commit::DryRun, Commit::Store] {
                match c.delete_stored_as("Namespace", None, ns, &Preconditions::default(), commit) {
                    Err(ApiError::Forbidden { message, .. }) => {
                        assert_eq!(message, "this namespace may not be deleted")
                    }
                    other => panic!("{ns}: expected Forbidden, got {other:?}"),
                }
            }
            assert_eq!(phase(&c, ns).as_deref(), Some("Active"));
            assert_eq!(pods_in(&c, ns), vec!["p"]);
        }
    }

    #[test]
    fn a_dry_run_namespace_delete_answers_terminating_and_keeps_everything() {
        let c = cluster();
        let answer = c.delete_stored_as("Namespace", None, "team", &Preconditions::default(), Commit::DryRun).unwrap();
        let Stored::Typed(AnyObject::Namespace(ns)) = answer else { panic!("not a Namespace") };
        assert_eq!(ns.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Terminating"));
        assert_eq!(phase(&c, "team").as_deref(), Some("Active"));
        assert_eq!(pods_in(&c, "team"), vec!["a", "b"]);
    }
}
