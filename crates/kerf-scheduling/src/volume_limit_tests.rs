//! EBS volume attach limits in the provisioning Scheduler and kube-scheduler's view: pods spread
//! by the volumes they attach, nodes without a limit take any number, and a pod no type can take
//! says so.

use std::collections::BTreeSet;
use std::sync::Arc;

use kerf_api::{ResourceList, SlimPod};

use crate::instance::InstanceType;
use crate::model::{NodePoolInput, SchedulingInput};
use crate::predicates::ClusterView;
use crate::scheduler::schedule;
use crate::testing::*;
use crate::volume_limits::ATTACHABLE_VOLUMES_EBS;

/// A pod asking for 100m that mounts claims `{name}-0` .. `{name}-{volumes - 1}`.
fn pod_with_volumes(name: &str, volumes: usize) -> Arc<SlimPod> {
    let vols: Vec<serde_json::Value> = (0..volumes)
        .map(|i| serde_json::json!({"name": format!("v{i}"), "persistentVolumeClaim": {"claimName": format!("{name}-{i}")}}))
        .collect();
    Arc::new(
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "100m"}}}], "volumes": vols}
        }))
        .unwrap(),
    )
}

/// Every claim of `pods` (as [`pod_with_volumes`] names them) as an EBS claim.
fn ebs(pods: &[(&str, usize)]) -> Arc<BTreeSet<String>> {
    Arc::new(pods.iter().flat_map(|(n, v)| (0..*v).map(move |i| format!("default/{n}-{i}"))).collect())
}

/// A type with 8 CPUs that attaches `volumes` EBS volumes.
fn attaching(name: &str, volumes: &str, price: f64) -> InstanceType {
    let mut t = instance_type(name, "8", "16Gi", "110", price, &["a"]);
    t.capacity.set(ATTACHABLE_VOLUMES_EBS, q(volumes));
    t
}

fn input(types: Vec<InstanceType>, pods: Vec<Arc<SlimPod>>, ebs_claims: Arc<BTreeSet<String>>) -> SchedulingInput {
    SchedulingInput {
        node_pools: vec![NodePoolInput {
            node_pool: Arc::new(node_pool("default", vec![])),
            instance_types: types.into_iter().map(Arc::new).collect(),
            in_use: ResourceList::new(),
        }],
        pods,
        ebs_claims,
        ..Default::default()
    }
}

#[test]
fn pods_that_fit_one_node_by_cpu_spread_over_nodes_by_attachable_volumes() {
    let shards: Vec<(&str, usize)> = vec![("s0", 10), ("s1", 10), ("s2", 10), ("s3", 10), ("s4", 10)];
    let pods = shards.iter().map(|(n, v)| pod_with_volumes(n, *v)).collect();
    let r = schedule(&input(vec![attaching("small", "26", 0.1)], pods, ebs(&shards)));
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    let mut sizes: Vec<usize> = r.new_node_claims.iter().map(|c| c.pods.len()).collect();
    sizes.sort();
    assert_eq!(sizes, vec![1, 2, 2], "two 10-volume pods per 26-volume node");
}

#[test]
fn volumes_of_other_drivers_and_types_without_a_limit_do_not_count() {
    let shards = [("s0", 10), ("s1", 10), ("s2", 10)];
    let pods: Vec<_> = shards.iter().map(|(n, v)| pod_with_volumes(n, *v)).collect();
    // No claim is an EBS claim: one node.
    let r = schedule(&input(vec![attaching("small", "26", 0.1)], pods.clone(), Arc::default()));
    assert_eq!(r.new_node_claims.len(), 1);
    // A type that states no limit takes them all.
    let unlimited = instance_type("plain", "8", "16Gi", "110", 0.1, &["a"]);
    let r = schedule(&input(vec![unlimited], pods, ebs(&shards)));
    assert_eq!(r.new_node_claims.len(), 1);
}

#[test]
fn a_pod_needing_more_volumes_than_any_type_attaches_names_the_count_and_the_type() {
    let pods = vec![pod_with_volumes("archive", 30)];
    let types = vec![attaching("small", "26", 0.1), attaching("large", "26", 0.2)];
    let r = schedule(&input(types, pods, ebs(&[("archive", 30)])));
    let (_, err) = &r.errors[0];
    assert!(err.message.contains("needs 30 volumes, small attaches 26"), "{}", err.message);
}

#[test]
fn existing_nodes_count_the_volumes_of_their_pods_in_both_fit_checks() {
    let mut full = node("full", &[], &[("cpu", "8"), ("pods", "110"), (ATTACHABLE_VOLUMES_EBS, "26")]);
    full.pods.push(pod_with_volumes("held", 20));
    let open = node("open", &[], &[("cpu", "8"), ("pods", "110")]);
    let claims = ebs(&[("held", 20), ("new", 10)]);
    let incoming = pod_with_volumes("new", 10);
    // kube-scheduler's view: the full node has 6 attachments left; the node without a limit takes it.
    let view = ClusterView::new(vec![full.clone(), open.clone()]).with_ebs_claims(Arc::clone(&claims));
    assert_eq!(view.check(&incoming, 0).unwrap_err().reason, "node(s) exceed max volume count");
    assert!(view.check(&incoming, 1).is_ok());
    // The provisioner places it on the node without a limit, never the full one.
    let mut i = input(vec![attaching("small", "26", 0.1)], vec![incoming], claims);
    i.existing_nodes = vec![full, open];
    let r = schedule(&i);
    assert_eq!(r.placements.len(), 1);
    assert_eq!(r.placements[0].node, "open");
}

#[test]
fn consolidation_does_not_move_pods_onto_a_node_without_attachments_to_spare() {
    let cluster = |claims: Arc<BTreeSet<String>>| {
        let limit = [("cpu", "8"), ("pods", "110"), (ATTACHABLE_VOLUMES_EBS, "26")];
        let mut n1 = node("n1", &[], &limit);
        n1.pods = vec![pod_with_volumes("a", 10), pod_with_volumes("b", 10)];
        let mut n2 = node("n2", &[], &limit);
        n2.pods = vec![pod_with_volumes("c", 10)];
        let mut i = input(vec![attaching("small", "26", 0.1)], Vec::new(), claims);
        i.existing_nodes = vec![n1, n2];
        crate::SchedulingContext::new(i)
    };
    // n1 has 6 attachments left: n2's 10-volume pod needs a node of its own.
    let w = cluster(ebs(&[("a", 10), ("b", 10), ("c", 10)])).without_nodes(&["n2"]).unwrap();
    assert!(!w.deletable());
    assert_eq!(w.new_node_claims.len(), 1);
    // Counted by CPU alone, it would move.
    assert!(cluster(Arc::default()).without_nodes(&["n2"]).unwrap().deletable());
}
