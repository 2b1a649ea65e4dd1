//! A node's labels as the scheduling inputs hold them: shared, never copied per input.
//!
//! A fleet's labels are most of what a scheduling input holds apart from its pods, and the
//! controllers build inputs all the time. An initialized node's labels are read from the very
//! `Node` the cluster state keeps (so a node's labels exist once, in its object); labels that
//! have no object to live in (an in-flight claim's, a simulated node's) are kept in a map of
//! their own, shared as well. Either way the value reads as the map.

use std::collections::BTreeMap;
use std::ops::Deref;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;

/// A node's labels, shared (see the module's doc).
#[derive(Debug, Clone)]
pub enum NodeLabels {
    /// Labels of their own.
    Own(Arc<BTreeMap<String, String>>),
    /// The labels of this Node object (none: empty).
    Node(Arc<Node>),
}

static EMPTY: BTreeMap<String, String> = BTreeMap::new();

impl NodeLabels {
    /// The labels of `node`, read from it.
    pub fn of_node(node: Arc<Node>) -> NodeLabels {
        NodeLabels::Node(node)
    }

    /// The labels to edit: a copy of their own when they are shared with anything else.
    pub fn to_mut(&mut self) -> &mut BTreeMap<String, String> {
        if let NodeLabels::Node(n) = self {
            *self = NodeLabels::Own(Arc::new(n.metadata.labels.clone().unwrap_or_default()));
        }
        match self {
            NodeLabels::Own(map) => Arc::make_mut(map),
            NodeLabels::Node(_) => unreachable!("made a map of its own above"),
        }
    }

    /// Whether both read the very same labels (the same map or the same Node object).
    pub fn ptr_eq(&self, other: &NodeLabels) -> bool {
        match (self, other) {
            (NodeLabels::Own(a), NodeLabels::Own(b)) => Arc::ptr_eq(a, b),
            (NodeLabels::Node(a), NodeLabels::Node(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

impl Deref for NodeLabels {
    type Target = BTreeMap<String, String>;

    fn deref(&self) -> &BTreeMap<String, String> {
        match self {
            NodeLabels::Own(map) => map,
            NodeLabels::Node(n) => n.metadata.labels.as_ref().unwrap_or(&EMPTY),
        }
    }
}

impl Default for NodeLabels {
    fn default() -> Self {
        NodeLabels::Own(Arc::default())
    }
}

impl From<BTreeMap<String, String>> for NodeLabels {
    fn from(map: BTreeMap<String, String>) -> Self {
        NodeLabels::Own(Arc::new(map))
    }
}

impl PartialEq for NodeLabels {
    fn eq(&self, other: &NodeLabels) -> bool {
        self.ptr_eq(other) || **self == **other
    }
}

impl Eq for NodeLabels {}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn node(labels: Option<&[(&str, &str)]>) -> Arc<Node> {
        Arc::new(Node {
            metadata: ObjectMeta {
                name: Some("n1".into()),
                labels: labels.map(|l| l.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
                ..ObjectMeta::default()
            },
            ..Node::default()
        })
    }

    #[test]
    fn a_nodes_labels_are_read_from_the_node_itself() {
        let n = node(Some(&[("zone", "a")]));
        let labels = NodeLabels::of_node(Arc::clone(&n));
        assert_eq!(labels.get("zone").map(String::as_str), Some("a"));
        let NodeLabels::Node(held) = &labels else { panic!("labels copied out of the node") };
        assert!(Arc::ptr_eq(held, &n));
        assert!(NodeLabels::of_node(node(None)).is_empty());
    }

    #[test]
    fn editing_shared_labels_leaves_the_node_and_other_holders_alone() {
        let n = node(Some(&[("zone", "a")]));
        let shared = NodeLabels::of_node(Arc::clone(&n));
        let mut edited = shared.clone();
        edited.to_mut().insert("zone".into(), "b".into());
        assert_eq!(shared.get("zone").map(String::as_str), Some("a"));
        assert_eq!(n.metadata.labels.as_ref().and_then(|l| l.get("zone")).map(String::as_str), Some("a"));
        assert_eq!(edited.get("zone").map(String::as_str), Some("b"));
        let mut own = NodeLabels::from(BTreeMap::from([("k".to_string(), "v".to_string())]));
        let copy = own.clone();
        own.to_mut().insert("k".into(), "w".into());
        assert_eq!(copy.get("k").map(String::as_str), Some("v"));
    }

    #[test]
    fn labels_compare_by_content_wherever_they_live() {
        let from_node = NodeLabels::of_node(node(Some(&[("zone", "a")])));
        let own = NodeLabels::from(BTreeMap::from([("zone".to_string(), "a".to_string())]));
        assert_eq!(from_node, own);
        assert_ne!(from_node, NodeLabels::default());
        assert_eq!(NodeLabels::of_node(node(None)), NodeLabels::default());
    }
}
