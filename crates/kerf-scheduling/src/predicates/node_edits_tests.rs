use super::*;
use crate::pod::pod_requests;
use crate::predicates::Unfit;
use crate::testing::*;
use kerf_api::{Taint, TaintEffect};

const Z: &str = "topology.kubernetes.io/zone";
const HOST: &str = "kubernetes.io/hostname";

fn zone_node(name: &str, zone: &str) -> ExistingNode {
    node(name, &[(Z, zone), (HOST, name)], &[("cpu", "4"), ("memory", "8Gi"), ("pods", "8")])
}

/// Pods whose verdicts and scores read every kind of count the view keeps.
fn probes() -> Vec<Arc<SlimPod>> {
    vec![
        pod("zone-spread").label("app", "w").cpu("500m").spread(Z, 1, &[("app", "w")]).build(),
        pod("host-spread").label("app", "w").spread(HOST, 1, &[("app", "w")]).build(),
        pod("anti").label("app", "db").anti_affinity(HOST, &[("app", "db")]).build(),
        pod("with-web").pod_affinity(Z, &[("app", "web")]).build(),
        pod("prefers")
            .preferred_pod_affinity(5, Z, &[("app", "w")])
            .preferred_anti_affinity(3, HOST, &[("app", "db")])
            .build(),
        pod("port").host_port(8080).build(),
        pod("large").cpu("3").memory("6Gi").build(),
        pod("gpu").request("nvidia.com/gpu", "1").build(),
    ]
}

pub(crate) type Verdicts = Vec<Vec<Result<(), String>>>;

/// What the view answers for every probe on every node, and what it holds per node.
pub(crate) fn answers(v: &ClusterView) -> (Verdicts, Vec<Vec<crate::predicates::PreferenceParts>>, Vec<String>) {
    let all: Vec<usize> = (0..v.nodes().len()).collect();
    let verdicts = probes()
        .iter()
        .map(|p| {
            let pp = v.prepare(p);
            all.iter().map(|&i| v.check_prepared(&pp, i).map_err(|u: Unfit| u.reason)).collect()
        })
        .collect();
    let prefs = probes().iter().map(|p| v.preference_parts(p, &all)).collect();
    let nodes = v
        .nodes()
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let requested: Vec<String> =
                v.requested(i).iter().filter(|(_, q)| !q.is_zero()).map(|(k, q)| format!("{k}={q:?}")).collect();
            let pods: Vec<&str> = n.pods.iter().map(|p| p.metadata.name.as_deref().unwrap_or("")).collect();
            format!(
                "{} {:?} {:?} {:?} {} {:?} {:?} {:?}",
                n.name,
                n.labels,
                n.taints,
                n.allocatable,
                n.schedulable,
                pods,
                requested,
                v.cpu_memory(i)
            )
        })
        .collect();
    (verdicts, prefs, nodes)
}

fn assert_as_fresh(v: &ClusterView, step: &str) {
    let fresh = ClusterView::new(v.nodes().to_vec());
    assert_eq!(answers(v), answers(&fresh), "after {step}");
}

#[test]
fn a_view_edited_node_by_node_answers_as_a_view_built_from_the_same_nodes() {
    let mut nodes: Vec<ExistingNode> =
        ["a", "b", "c", "a", "b"].iter().enumerate().map(|(i, z)| zone_node(&format!("n{i}"), z)).collect();
    nodes[0].pods.push(pod("w0").label("app", "w").cpu("1").build());
    nodes[1].pods.push(pod("db0").label("app", "db").anti_affinity(HOST, &[("app", "db")]).build());
    nodes[3].pods.push(pod("web0").label("app", "web").host_port(8080).build());
    let mut v = ClusterView::new(nodes);
    // Every count is cached before the edits, so the edits must keep the caches right.
    assert_as_fresh(&v, "the build");

    let mut n = zone_node("m", "c");
    n.pods.push(pod("db1").label("app", "db").anti_affinity(HOST, &[("app", "db")]).build());
    n.pods.push(pod("w1").label("app", "w").build());
    v.insert_node(1, n, |p| Arc::new(pod_requests(p)));
    assert_as_fresh(&v, "a node inserted in the middle");

    let removed = v.remove_node(2);
    assert_eq!(removed.map(|n| (n.name, n.pods.len())), Some(("n1".to_string(), 1)));
    assert_as_fresh(&v, "a node with an anti-affinity pod removed");

    let mut changed = v.nodes()[0].clone();
    changed.labels.to_mut().insert(Z.to_string(), "c".to_string());
    changed.taints.push(Taint::new("dedicated", Some("x"), TaintEffect::NoSchedule));
    changed.allocatable = Arc::new(rl(&[("cpu", "8"), ("memory", "16Gi"), ("pods", "8"), ("nvidia.com/gpu", "2")]));
    v.update_node(0, changed);
    assert_as_fresh(&v, "a node relabelled, tainted and grown");

    let mut cordoned = v.nodes()[3].clone();
    cordoned.schedulable = false;
    v.update_node(3, cordoned);
    assert_as_fresh(&v, "a node cordoned");

    let kept = v.nodes()[1].pods[1].clone();
    let pods = vec![
        pod("gpu0").request("nvidia.com/gpu", "1").build(),
        kept,
        pod("db2").label("app", "db").anti_affinity(HOST, &[("app", "db")]).build(),
    ];
    v.set_pods(1, pods, |p| Arc::new(pod_requests(p)));
    assert_as_fresh(&v, "a node's pods replaced");

    v.insert_node(v.nodes().len(), zone_node("z", "b"), |p| Arc::new(pod_requests(p)));
    v.remove_node(0);
    v.set_pods(0, Vec::new(), |p| Arc::new(pod_requests(p)));
    assert_as_fresh(&v, "a node appended, the first removed, another emptied");
}

#[test]
fn a_view_takes_equal_labels_from_a_newer_object_and_leaves_different_ones() {
    let mut v = ClusterView::new(vec![zone_node("n0", "a"), zone_node("n1", "b")]);
    let newer = NodeLabels::from((*v.nodes()[0].labels).clone());
    assert!(!v.nodes()[0].labels.ptr_eq(&newer));
    v.share_labels(0, &newer);
    assert!(v.nodes()[0].labels.ptr_eq(&newer), "the view holds the newer copy");
    assert_as_fresh(&v, "equal labels shared");

    let mut other = (*v.nodes()[1].labels).clone();
    other.insert(Z.to_string(), "c".to_string());
    v.share_labels(1, &NodeLabels::from(other));
    assert_eq!(v.nodes()[1].labels.get(Z).map(String::as_str), Some("b"), "different labels are update_node's");
}
