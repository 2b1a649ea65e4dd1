//! kube-scheduler's view of the existing nodes kept from one evaluation for the next. Building
//! it adds every pod of the cluster to a [`ClusterView`] and counts them again for each
//! selector; consecutive evaluations see clusters that differ in a few nodes (a command's
//! nodes tainted or gone, a replacement joined, the pods moved). [`KeptKubeView`] holds the
//! last view; the next context or replay edits it to its own input (nodes gone taken out, new
//! nodes put in at their place, changed nodes and pods replaced) instead of building it, and
//! the edited view answers as one built afresh from that input does.

use std::sync::Arc;

use crate::kube_choice;
use crate::model::{ExistingNode, SchedulingInput};
use crate::pod::pod_requests;

use super::replay::KubeView;

/// kube-scheduler's view kept from an earlier context or replay (see the module doc); empty
/// when there is none.
#[derive(Default)]
pub struct KeptKubeView(pub(super) Option<KubeView>);

impl std::fmt::Debug for KeptKubeView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("KeptKubeView").field(&self.0.as_ref().map(|v| v.view.nodes().len())).finish()
    }
}

impl KeptKubeView {
    /// Whether a view is kept.
    pub fn is_some(&self) -> bool {
        self.0.is_some()
    }
}

impl KubeView {
    /// This view (of an earlier input, as built: no node hidden or pushed) edited to the view
    /// [`KubeView::build`] builds from `input`; `None` when it cannot be (the namespaces or
    /// volumes differ, or the nodes both inputs have are in another order).
    pub(super) fn edited_to(mut self, input: &SchedulingInput) -> Option<Self> {
        if self.volumes != input.volume_requirements || self.namespace_labels != input.namespace_labels {
            return None;
        }
        let nodes: Vec<&ExistingNode> = input.existing_nodes.iter().filter(|n| !n.in_flight).collect();
        let position: std::collections::HashMap<&str, usize> =
            nodes.iter().enumerate().map(|(i, n)| (n.name.as_str(), i)).collect();
        let mut reindex = false;
        for idx in (0..self.view.nodes().len()).rev() {
            if !position.contains_key(self.view.nodes()[idx].name.as_str()) {
                self.view.remove_node(idx);
                reindex = true;
            }
        }
        let mut last = None;
        for n in self.view.nodes() {
            let at = position.get(n.name.as_str()).copied();
            if at <= last {
                return None;
            }
            last = at;
        }
        let parse = |p: &Arc<kerf_api::SlimPod>| Arc::new(pod_requests(p));
        for (i, n) in nodes.iter().enumerate() {
            if self.view.nodes().get(i).map(|v| v.name.as_str()) != Some(n.name.as_str()) {
                self.view.insert_node(i, (*n).clone(), parse);
                reindex = true;
                continue;
            }
            if !self.view.nodes()[i].same_apart_from_pods(n) {
                self.view.update_node(i, ExistingNode { pods: Vec::new(), ..(*n).clone() });
            }
            if !self.view.nodes()[i].holds_same_pods(n) {
                self.view.set_pods(i, n.pods.clone(), parse);
            }
        }
        if reindex {
            self.index = self.view.nodes().iter().enumerate().map(|(i, n)| (n.name.clone(), i)).collect();
        }
        self.ranking = kube_choice::Ranking::new(&self.view);
        self.copies.ranking_made_anew();
        Some(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::predicates::node_edits::tests::answers;
    use crate::testing::*;

    const Z: &str = "topology.kubernetes.io/zone";
    const HOST: &str = "kubernetes.io/hostname";

    fn zone_node(name: &str, zone: &str, pods: Vec<Arc<kerf_api::SlimPod>>) -> ExistingNode {
        let mut n = node(name, &[(Z, zone), (HOST, name)], &[("cpu", "4"), ("memory", "8Gi"), ("pods", "8")]);
        n.pods = pods;
        n
    }

    fn web(name: &str) -> Arc<kerf_api::SlimPod> {
        pod(name).label("app", "w").cpu("500m").build()
    }

    fn db(name: &str) -> Arc<kerf_api::SlimPod> {
        pod(name).label("app", "db").anti_affinity(HOST, &[("app", "db")]).build()
    }

    /// The view as a view built from `input` must be: the same nodes (pods by identity, in
    /// order), the same index, the same answers.
    fn assert_built_as(kv: &KubeView, input: &SchedulingInput, step: &str) {
        let fresh = build(input);
        let ids = |v: &KubeView| -> Vec<Vec<usize>> {
            v.view.nodes().iter().map(|n| n.pods.iter().map(|p| Arc::as_ptr(p) as usize).collect()).collect()
        };
        assert_eq!(ids(kv), ids(&fresh), "{step}: pods");
        let mut index: Vec<(&String, &usize)> = kv.index.iter().collect();
        let mut fresh_index: Vec<(&String, &usize)> = fresh.index.iter().collect();
        index.sort();
        fresh_index.sort();
        assert_eq!(index, fresh_index, "{step}: index");
        assert_eq!(answers(&kv.view), answers(&fresh.view), "{step}: answers");
    }

    /// kube-scheduler's view built from `input`, as a replay builds it.
    fn build(input: &SchedulingInput) -> KubeView {
        let existing = input.existing_nodes.iter().flat_map(|n| n.pods.iter());
        let facts = super::super::facts::gather(input.pods.iter().chain(existing), None);
        KubeView::build(input, |pi| facts[pi].as_ref())
    }

    #[test]
    fn a_kept_view_edited_to_a_changed_cluster_is_the_view_built_from_it() {
        let (w0, w1, d0) = (web("w0"), web("w1"), db("d0"));
        let mut input = SchedulingInput {
            existing_nodes: vec![
                zone_node("a", "z1", vec![Arc::clone(&w0)]),
                zone_node("b", "z2", vec![Arc::clone(&d0)]),
                zone_node("c", "z3", vec![Arc::clone(&w1)]),
            ],
            ..SchedulingInput::default()
        };
        let built = build(&input);
        assert_built_as(&built, &input, "the build");

        // A node gone with its pods, one joined in the middle, another relabelled and cordoned,
        // one whose pods moved (a new copy of one, as a running command leaves it).
        input.existing_nodes.remove(1);
        input.existing_nodes.insert(1, zone_node("b2", "z2", vec![db("d1"), web("w2")]));
        input.existing_nodes[2].labels.insert(Z.to_string(), "z1".to_string());
        input.existing_nodes[2].schedulable = false;
        input.existing_nodes[0].pods = vec![Arc::new((*w0).clone()), Arc::clone(&w1)];
        // An in-flight claim is no node of kube-scheduler's.
        let mut claim = zone_node("claim", "z3", Vec::new());
        claim.in_flight = true;
        input.existing_nodes.push(claim);
        let edited = built.edited_to(&input).expect("same namespaces and volumes");
        assert_built_as(&edited, &input, "the first edit");

        input.existing_nodes.retain(|n| n.name != "a");
        input.existing_nodes.push(zone_node("d", "z3", vec![db("d2")]));
        let edited = edited.edited_to(&input).expect("same namespaces and volumes");
        assert_built_as(&edited, &input, "the second edit");

        // Replays on the edited view answer as on a view built afresh, whether kube-scheduler
        // finds room for the drained node's pods (c's) or not (b2's: a second db pod fits no
        // other node).
        let input = Arc::new(input);
        let replays = |kv: KubeView| -> Vec<Result<(), String>> {
            let mut replay = super::super::KubeReplay::with_kept(
                Arc::clone(&input),
                &super::super::PodFactsCache::new(),
                KeptKubeView(Some(kv)),
            );
            [vec!["c"], vec!["b2"], vec!["c", "d"]]
                .iter()
                .map(|removed| replay.in_turn(&[super::super::Turn { removed: removed.clone(), ..Default::default() }]))
                .collect()
        };
        let kept = |kv: &KubeView| kv.copies.by_pod.contains_key(&(Arc::as_ptr(&w1) as usize));
        let mut edited = edited;
        let _ = edited.kind_of(&w1);
        let edited = edited.edited_to(&input).expect("same namespaces and volumes");
        assert!(kept(&edited), "a pod still held keeps its kind across the edit");
        let edited = edited.edited_to(&input).expect("same namespaces and volumes");
        assert!(!kept(&edited), "a pod not asked for since the last edit is dropped at the next");
        let answers = replays(edited);
        assert!(answers[1].is_err(), "{answers:?}");
        assert_eq!(answers, replays(build(&input)));
        let mut input = Arc::unwrap_or_clone(input);
        let edited = build(&input);

        // Nodes both clusters have, in another order: built again.
        input.existing_nodes.reverse();
        assert!(edited.edited_to(&input).is_none());
    }
}
