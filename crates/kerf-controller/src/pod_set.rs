//! A set of shared pods ordered by their `(namespace, name)` key, read from each pod itself.
//!
//! The cluster state keeps every pod of the cluster and, again, each node's pods: tens of
//! thousands of each in a large cluster. Keyed by the pod's own metadata, an entry is one
//! pointer rather than a pointer and two owned strings.

use std::collections::BTreeSet;
use std::ops::Bound;
use std::sync::Arc;

use kerf_api::SlimPod;
use kerf_api::str_pair::StrPair;

/// A pod's key, borrowed: a missing namespace or name reads as empty, as the cluster state's
/// object keys are made.
pub(crate) fn key(pod: &SlimPod) -> (&str, &str) {
    (pod.metadata.namespace.as_deref().unwrap_or_default(), pod.metadata.name.as_deref().unwrap_or_default())
}

/// A pod compared by its [`key`].
#[derive(Debug, Clone)]
struct Keyed(Arc<SlimPod>);

impl StrPair for Keyed {
    fn first(&self) -> &str {
        key(&self.0).0
    }
    fn second(&self) -> &str {
        key(&self.0).1
    }
}

kerf_api::ordered_by_str_pair!(Keyed);

/// Pods by key, in key order.
#[derive(Debug, Clone, Default)]
pub struct PodSet(BTreeSet<Keyed>);

impl PodSet {
    /// The pod named `name` in `namespace`.
    pub fn get(&self, namespace: &str, name: &str) -> Option<&Arc<SlimPod>> {
        self.0.get(&(namespace, name) as &dyn StrPair).map(|k| &k.0)
    }

    /// Adds `pod`, replacing the one with its key; the one replaced.
    pub fn insert(&mut self, pod: Arc<SlimPod>) -> Option<Arc<SlimPod>> {
        self.0.replace(Keyed(pod)).map(|k| k.0)
    }

    /// Takes out the pod named `name` in `namespace`.
    pub fn remove(&mut self, namespace: &str, name: &str) -> Option<Arc<SlimPod>> {
        self.0.take(&(namespace, name) as &dyn StrPair).map(|k| k.0)
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Every pod, in key order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &Arc<SlimPod>> + DoubleEndedIterator {
        self.0.iter().map(|k| &k.0)
    }

    /// The pods of `namespace`, in name order.
    pub fn in_namespace<'a>(&'a self, namespace: &'a str) -> impl Iterator<Item = &'a Arc<SlimPod>> + 'a {
        let from = (namespace, "");
        let range = self.0.range::<dyn StrPair, _>((Bound::Included(&from as &dyn StrPair), Bound::Unbounded));
        range.take_while(move |k| k.first() == namespace).map(|k| &k.0)
    }
}

#[cfg(test)]
mod tests {
    use kerf_api::slim_meta::SlimMeta;

    use super::*;

    fn pod(ns: Option<&str>, name: &str, rv: &str) -> Arc<SlimPod> {
        Arc::new(SlimPod {
            metadata: SlimMeta {
                namespace: ns.map(str::to_string),
                name: Some(name.to_string()),
                resource_version: Some(rv.to_string()),
                ..Default::default()
            },
            spec: None,
            status: None,
        })
    }

    fn names<'a>(it: impl Iterator<Item = &'a Arc<SlimPod>>) -> Vec<String> {
        it.map(|p| {
            format!("{}/{}", p.metadata.namespace.as_deref().unwrap_or(""), p.metadata.name.as_deref().unwrap_or(""))
        })
        .collect()
    }

    #[test]
    fn pods_are_found_replaced_and_removed_by_their_key_in_key_order() {
        let mut set = PodSet::default();
        for (ns, name) in [(Some("b"), "x"), (Some("a"), "y"), (Some("a"), "ab"), (None, "z"), (Some("ab"), "a")] {
            assert!(set.insert(pod(ns, name, "1")).is_none());
        }
        assert_eq!(names(set.iter()), ["/z", "a/ab", "a/y", "ab/a", "b/x"]);
        assert_eq!(set.get("", "z").and_then(|p| p.metadata.name.as_deref()), Some("z"), "no namespace reads as empty");
        let replaced = set.insert(pod(Some("a"), "y", "2"));
        assert_eq!(replaced.and_then(|p| p.metadata.resource_version.clone()).as_deref(), Some("1"));
        assert_eq!(set.get("a", "y").and_then(|p| p.metadata.resource_version.as_deref()), Some("2"));
        assert_eq!(set.len(), 5);
        assert_eq!(names(set.in_namespace("a")), ["a/ab", "a/y"]);
        assert_eq!(names(set.in_namespace("ab")), ["ab/a"]);
        assert_eq!(names(set.in_namespace("c")), Vec::<String>::new());
        assert!(set.remove("a", "ab").is_some());
        assert!(set.remove("a", "ab").is_none() && set.get("a", "ab").is_none());
        assert_eq!(names(set.iter()), ["/z", "a/y", "ab/a", "b/x"]);
    }
}
