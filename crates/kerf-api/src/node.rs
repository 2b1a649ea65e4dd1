//! What a core/v1 Node says about itself that the controllers, the simulator's stand-ins and
//! the in-memory API server's admission read: whether it is Ready.

use k8s_openapi::api::core::v1::Node;

/// The node's `Ready` condition is `True`.
pub fn node_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}
