//! A stand-in for the node lifecycle controller's NoSchedule taints by condition (Kubernetes'
//! TaintNodesByCondition): a Node whose Ready condition is False carries
//! `node.kubernetes.io/not-ready:NoSchedule`, one whose Ready condition is Unknown
//! `node.kubernetes.io/unreachable:NoSchedule`, and one that has posted no Ready condition yet
//! keeps the not-ready taint the API server's admission gave it at creation
//! ([`SimCluster::taint_nodes_by_condition`]). The taint goes once the node is Ready and comes
//! back when it is not. kube-scheduler's taint filter then keeps every pod that does not tolerate
//! it off such a node, DaemonSet pods included (the DaemonSet controller's tolerations cover
//! not-ready only for NoExecute). Other taints, the NoExecute ones among them, are left alone.

use k8s_openapi::api::core::v1::{Node, NodeSpec, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kerf_api::labels::{NODE_NOT_READY_TAINT_KEY, NODE_UNREACHABLE_TAINT_KEY};
use kerf_cloud::Timestamp;

use crate::world::World;
use kerf_apiserver::SimCluster;

const NO_SCHEDULE: &str = "NoSchedule";

/// The condition taint key the node's Ready condition calls for, if any.
fn wanted(node: &Node) -> Option<&'static str> {
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        .map(|c| c.status.as_str());
    match ready {
        Some("True") => None,
        Some("Unknown") => Some(NODE_UNREACHABLE_TAINT_KEY),
        _ => Some(NODE_NOT_READY_TAINT_KEY),
    }
}

/// Whether the node lifecycle controller owns this taint (a NoSchedule taint of a Ready state).
fn owned(t: &Taint) -> bool {
    t.effect == NO_SCHEDULE && (t.key == NODE_NOT_READY_TAINT_KEY || t.key == NODE_UNREACHABLE_TAINT_KEY)
}

/// The node with its Ready-condition taint as the condition says, or `None` when it already is.
pub fn retainted(node: &Node, now: Timestamp) -> Option<Node> {
    let want = wanted(node);
    let taints = node.spec.as_ref().and_then(|s| s.taints.as_deref()).unwrap_or_default();
    let mut have = taints.iter().filter(|t| owned(t));
    let settled = match want {
        Some(key) => have.next().is_some_and(|t| t.key == key) && have.next().is_none(),
        None => have.next().is_none(),
    };
    if settled {
        return None;
    }
    let mut n = node.clone();
    let spec = n.spec.get_or_insert_with(NodeSpec::default);
    let mut kept: Vec<Taint> = taints.iter().filter(|t| !owned(t)).cloned().collect();
    if let Some(key) = want {
        kept.push(Taint {
            key: key.to_string(),
            effect: NO_SCHEDULE.to_string(),
            time_added: Some(Time(now)),
            value: None,
        });
    }
    spec.taints = (!kept.is_empty()).then_some(kept);
    Some(n)
}

/// Brings the Ready-condition taint of each of the `changed` nodes in line with its Ready
/// condition. A write that loses a race is retried on the node's next change, which the
/// winner's write is.
pub fn sync<'a>(changed: impl IntoIterator<Item = &'a String>, world: &World, cluster: &SimCluster, now: Timestamp) {
    for name in changed {
        let Some(node) = world.nodes.get(name) else { continue };
        let Some(n) = retainted(node, now) else { continue };
        if let Err(e) = cluster.update_obj(n) {
            tracing::debug!(node = %name, error = %e, "cannot update the node's condition taints yet");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{NodeCondition, NodeStatus};
    use kerf_cloud::{Clock, ManualClock};

    fn node(ready: Option<&str>, taints: &[(&str, &str)]) -> Node {
        Node {
            spec: Some(NodeSpec {
                taints: Some(
                    taints
                        .iter()
                        .map(|(k, e)| Taint { key: k.to_string(), effect: e.to_string(), ..Taint::default() })
                        .collect(),
                ),
                ..NodeSpec::default()
            }),
            status: Some(NodeStatus {
                conditions: ready.map(|r| {
                    vec![NodeCondition { type_: "Ready".to_string(), status: r.to_string(), ..Default::default() }]
                }),
                ..NodeStatus::default()
            }),
            ..Node::default()
        }
    }

    fn keys(n: &Node) -> Vec<String> {
        n.spec.iter().flat_map(|s| s.taints.iter().flatten()).map(|t| format!("{}:{}", t.key, t.effect)).collect()
    }

    #[test]
    fn the_ready_condition_picks_the_no_schedule_taint_and_leaves_the_others() {
        let now = ManualClock::new().now();
        let nr = "node.kubernetes.io/not-ready";
        let ur = "node.kubernetes.io/unreachable";
        let fix = |ready, taints: &[(&str, &str)]| retainted(&node(ready, taints), now).map(|n| keys(&n));
        assert_eq!(fix(Some("True"), &[(nr, "NoSchedule"), ("a", "NoSchedule")]), Some(vec!["a:NoSchedule".into()]));
        assert_eq!(fix(Some("True"), &[("a", "NoSchedule")]), None);
        assert_eq!(fix(None, &[]), Some(vec![format!("{nr}:NoSchedule")]));
        assert_eq!(fix(None, &[(nr, "NoSchedule")]), None);
        assert_eq!(
            fix(Some("False"), &[(ur, "NoExecute")]),
            Some(vec![format!("{ur}:NoExecute"), format!("{nr}:NoSchedule")]),
            "NoExecute taints are not the NoSchedule pass's"
        );
        assert_eq!(fix(Some("Unknown"), &[(nr, "NoSchedule")]), Some(vec![format!("{ur}:NoSchedule")]));
        assert_eq!(fix(Some("Unknown"), &[(ur, "NoSchedule")]), None);
    }
}
