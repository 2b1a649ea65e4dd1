//! [`kube_choice`](crate::kube_choice)'s replays checked against filtering and scoring every
//! node for every pod, on small random clusters.

use crate::kube_choice::*;
use std::collections::HashMap;
use std::sync::Arc;

use kerf_api::SlimPod;
use kerf_api::TaintEffect;

use crate::model::ExistingNode;
use crate::predicates::{ClusterView, PreparedPod};
use crate::testing::*;
use kerf_api::Taint;

const Z: &str = "topology.kubernetes.io/zone";
const H: &str = "kubernetes.io/hostname";

/// A small deterministic generator (the same trials every run).
struct Lcg(u64);
impl Lcg {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((self.0 >> 33) as usize) % n.max(1)
    }
}

fn cluster(rng: &mut Lcg, prefer_no_schedule: bool) -> ClusterView {
    let zones = ["a", "b", "c"];
    let mut nodes: Vec<ExistingNode> = (0..18)
        .map(|i| {
            let cpu = ["2", "4", "8"][i % 3];
            let mem = ["4Gi", "8Gi", "16Gi"][(i / 3) % 3];
            node(
                &format!("n{:02}", (i * 7) % 18),
                &[(Z, zones[i % 3])],
                &[("cpu", cpu), ("memory", mem), ("pods", "9")],
            )
        })
        .collect();
    nodes[4].schedulable = false;
    nodes[5].taints.push(Taint::new("dedicated", Some("x"), TaintEffect::NoSchedule));
    if prefer_no_schedule {
        nodes[6].taints.push(Taint::new("soft", None, TaintEffect::PreferNoSchedule));
    }
    let mut view = ClusterView::new(nodes);
    for i in 0..70 {
        let p = workload_pod(rng, i);
        let fits = (0..view.nodes().len()).filter(|n| view.check(&p, *n).is_ok()).collect::<Vec<_>>();
        if !fits.is_empty() {
            let n = fits[rng.below(fits.len())];
            view.add_pod(n, p);
        }
    }
    view
}

fn workload_pod(rng: &mut Lcg, i: usize) -> Arc<SlimPod> {
    let cpu = ["100m", "250m", "500m", "1"][rng.below(4)];
    let mem = ["128Mi", "512Mi", "1Gi"][rng.below(3)];
    let b = pod(&format!("p{i}")).cpu(cpu).memory(mem);
    match rng.below(9) {
        0 => b.label("app", "spread").spread(Z, 1, &[("app", "spread")]),
        1 => b.label("app", "host").spread(H, 1, &[("app", "host")]),
        2 => b.label("app", "anti").anti_affinity(H, &[("app", "anti")]),
        3 => b.label("app", "db").pod_affinity(Z, &[("app", "db")]),
        4 => b.label("app", "pinned").node_selector(Z, "b"),
        5 => b.label("app", "tolerant").toleration("dedicated", Some("x"), Some("NoSchedule")),
        6 => b.label("app", "ports").host_port(8080),
        7 => b.label("app", "pref").preferred_anti_affinity(5, H, &[("app", "pref")]),
        _ => b.label("app", "web"),
    }
    .build()
}

fn unbound(p: &Arc<SlimPod>) -> Arc<SlimPod> {
    let mut fresh = SlimPod::clone(p);
    if let Some(spec) = fresh.spec.as_mut() {
        spec.node_name = None;
    }
    Arc::new(fresh)
}

#[test]
fn a_view_whose_pods_were_taken_off_and_added_back_with_their_requests_equals_one_built_afresh() {
    let mut rng = Lcg(11);
    let mut view = cluster(&mut rng, false);
    for step in 0..200 {
        let n = rng.below(view.nodes().len());
        match (rng.below(3), view.nodes()[n].pods.len()) {
            (0, _) | (_, 0) => {
                let p = workload_pod(&mut rng, 1000 + step);
                let requests = Arc::new(crate::pod::pod_requests(&p));
                view.add_pod_with(n, p, requests);
            }
            (1, len) => {
                let p = Arc::clone(&view.nodes()[n].pods[rng.below(len)]);
                let requests = view.take_pod(n, &p).expect("the pod is on the node");
                let to = rng.below(view.nodes().len());
                view.add_pod_with(to, p, requests);
            }
            (_, len) => {
                let p = Arc::clone(&view.nodes()[n].pods[rng.below(len)]);
                assert!(view.remove_pod(n, &p));
            }
        }
    }
    let fresh = ClusterView::new(view.nodes().to_vec());
    for n in 0..view.nodes().len() {
        // Taking every pod off leaves zero quantities where a fresh view has no entry.
        let nonzero = |v: &ClusterView| {
            v.requested(n).iter().filter(|(_, q)| !q.is_zero()).map(|(k, q)| (k.clone(), q.nanos())).collect::<Vec<_>>()
        };
        assert_eq!(nonzero(&view), nonzero(&fresh), "node {n}");
        assert_eq!(view.cpu_memory(n), fresh.cpu_memory(n), "node {n}");
    }
    for i in 0..40 {
        let p = workload_pod(&mut rng, 2000 + i);
        assert_eq!(view.feasible_nodes(&p), fresh.feasible_nodes(&p), "pod {i}");
        let known = view.prepare_with(&p, Some(Arc::new(crate::pod::pod_requests(&p))));
        let verdicts = |v: &ClusterView, pp: &PreparedPod<'_>| {
            (0..v.nodes().len()).map(|n| v.check_prepared(pp, n).map_err(|u| u.reason)).collect::<Vec<_>>()
        };
        assert_eq!(verdicts(&view, &known), verdicts(&fresh, &fresh.prepare(&p)), "pod {i}");
    }
}

#[test]
fn a_ranked_replay_in_turns_binds_every_pod_where_filtering_and_scoring_every_node_does() {
    // Three commands in turn: their nodes hidden from the start, the first's pods bound once
    // its node goes, then the second's (after a replacement joins, sometimes), on what the
    // first left, then the third's.
    let mut rng = Lcg(5);
    let (mut bound, mut refused) = (0, 0);
    for variant in 0..3 {
        let mut view = cluster(&mut rng, variant == 2);
        let mut ranking = Ranking::new(&view);
        let mut kinds: HashMap<Vec<u8>, usize> = HashMap::new();
        for _ in 0..60 {
            let n = view.nodes().len();
            let turns = [rng.below(n), rng.below(n), rng.below(n)];
            if turns[0] == turns[1] || turns[1] == turns[2] || turns[0] == turns[2] {
                continue;
            }
            let moved: Vec<Vec<Arc<SlimPod>>> =
                turns.iter().map(|n| view.nodes()[*n].pods.iter().map(unbound).collect()).collect();
            let ids: Vec<Vec<usize>> = moved
                .iter()
                .map(|pods| {
                    pods.iter()
                        .map(|p| {
                            let key = kind_key(p);
                            *kinds.entry(key.clone()).or_insert_with(|| ranking.add_kind(&view, p, &key))
                        })
                        .collect()
                })
                .collect();
            // The ranked replay prepares the pods from filters kept from before any node went.
            let filters: Vec<Vec<_>> =
                moved.iter().map(|pods| pods.iter().map(|p| view.pod_filters(p, None)).collect()).collect();
            let push = rng.below(2) == 0;
            let mut outcomes = Vec::new();
            for ranked in [false, true] {
                turns.iter().for_each(|n| view.set_hidden(*n, true));
                let mut session = Replay::new(&view, ranked.then_some(&ranking));
                let mut taken = Vec::new();
                let mut pushed = false;
                let mut outcome = Vec::new();
                for (t, &n) in turns.iter().enumerate() {
                    let on = view.nodes()[n].pods.clone();
                    on.iter().for_each(|p| {
                        view.remove_pod(n, p);
                    });
                    taken.push((n, on));
                    if t == 1 && push {
                        view.push_node(node("joined", &[(Z, "a")], &[("cpu", "4"), ("memory", "8Gi"), ("pods", "9")]));
                        pushed = true;
                    }
                    let r = session.bind(&mut view, &moved[t], Some(&ids[t]), ranked.then_some(filters[t].as_slice()));
                    let failed = r.is_err();
                    outcome.push(r);
                    if failed {
                        break;
                    }
                }
                session.finish(&mut view);
                if pushed {
                    view.pop_node();
                }
                for (n, on) in taken.into_iter().rev() {
                    on.into_iter().for_each(|p| view.add_pod(n, p));
                }
                turns.iter().for_each(|n| view.set_hidden(*n, false));
                outcomes.push(outcome);
            }
            assert_eq!(outcomes[1], outcomes[0], "variant {variant}, nodes {turns:?} in turn");
            if outcomes[0].iter().all(Result::is_ok) { bound += 1 } else { refused += 1 }
        }
    }
    assert!(bound > 10 && refused > 5, "{bound} bound, {refused} refused");
}

#[test]
fn a_ranked_replay_binds_every_pod_where_filtering_and_scoring_every_node_does() {
    let mut rng = Lcg(7);
    let (mut same_failures, mut same_successes) = (0, 0);
    for variant in 0..4 {
        let mut view = cluster(&mut rng, variant == 3);
        let mut ranking = Ranking::new(&view);
        let mut kinds: HashMap<Vec<u8>, usize> = HashMap::new();
        for _ in 0..60 {
            // Take one to four nodes away with their pods; sometimes a replacement comes.
            let mut removed: Vec<usize> = (0..1 + rng.below(4)).map(|_| rng.below(view.nodes().len())).collect();
            removed.sort();
            removed.dedup();
            let moved: Vec<Arc<SlimPod>> =
                removed.iter().flat_map(|n| view.nodes()[*n].pods.iter().map(unbound)).collect();
            let ids: Vec<usize> = moved
                .iter()
                .map(|p| {
                    let key = kind_key(p);
                    *kinds.entry(key.clone()).or_insert_with(|| ranking.add_kind(&view, p, &key))
                })
                .collect();
            // Kept from the view before the nodes go, in the order the pods are replayed.
            let mut filters: Vec<_> = moved.iter().map(|p| view.pod_filters(p, None)).collect();
            let mut taken = Vec::new();
            for &n in &removed {
                let on = view.nodes()[n].pods.clone();
                on.iter().for_each(|p| {
                    view.remove_pod(n, p);
                });
                view.set_hidden(n, true);
                taken.push((n, on));
            }
            let pushed = (rng.below(3) == 0).then(|| {
                let mut n = node("replacement", &[(Z, "c")], &[("cpu", "4"), ("memory", "8Gi"), ("pods", "9")]);
                if variant == 2 {
                    n.taints.push(Taint::new("soft", None, TaintEffect::PreferNoSchedule));
                }
                view.push_node(n)
            });
            let mut order: Vec<usize> = (0..moved.len()).collect();
            if rng.below(2) == 0 {
                order.reverse();
            }
            let pods: Vec<Arc<SlimPod>> = order.iter().map(|i| Arc::clone(&moved[*i])).collect();
            filters = order.iter().map(|i| Arc::clone(&filters[*i])).collect();
            let pod_kinds: Vec<usize> = order.iter().map(|i| ids[*i]).collect();
            let plain = replay(&mut view, &pods, None, None);
            let ranked = replay(&mut view, &pods, Some((&ranking, &pod_kinds)), None);
            assert_eq!(
                replay(&mut view, &pods, Some((&ranking, &pod_kinds)), Some(&filters)),
                ranked,
                "ranked with kept filters, variant {variant}, nodes {removed:?} taken away"
            );
            assert_eq!(
                replay(&mut view, &pods, None, Some(&filters)),
                plain,
                "plain with kept filters, variant {variant}, nodes {removed:?} taken away"
            );
            assert_eq!(ranked, plain, "variant {variant}, nodes {removed:?} taken away");
            if plain.is_ok() {
                same_successes += 1
            } else {
                same_failures += 1
            }
            if pushed.is_some() {
                view.pop_node();
            }
            for (n, on) in taken.into_iter().rev() {
                view.set_hidden(n, false);
                on.into_iter().for_each(|p| view.add_pod(n, p));
            }
        }
    }
    assert!(same_successes > 20 && same_failures > 20, "{same_successes} bound, {same_failures} refused");
}

/// `p` as bound to the node named `node` (its `spec.nodeName` set).
fn bound_to(p: &Arc<SlimPod>, node: &str) -> Arc<SlimPod> {
    let mut b = SlimPod::clone(p);
    if let Some(spec) = b.spec.as_mut() {
        spec.node_name = Some(kerf_api::slim_pod::node_name(node));
    }
    Arc::new(b)
}

#[test]
fn a_replay_binds_pods_still_naming_their_old_node_as_it_binds_their_unbound_copies() {
    // The moved pods are replayed as they are, still bound to the node taken away: every
    // replay, plain and ranked, must bind them where it binds their owners' new copies.
    let mut rng = Lcg(23);
    let (mut bound, mut refused) = (0, 0);
    for variant in 0..3 {
        let mut view = cluster(&mut rng, variant == 2);
        let mut ranking = Ranking::new(&view);
        let mut kinds: HashMap<Vec<u8>, usize> = HashMap::new();
        for _ in 0..40 {
            let mut removed: Vec<usize> = (0..1 + rng.below(3)).map(|_| rng.below(view.nodes().len())).collect();
            removed.sort();
            removed.dedup();
            let on: Vec<(usize, Arc<SlimPod>)> =
                removed.iter().flat_map(|n| view.nodes()[*n].pods.iter().map(|p| (*n, Arc::clone(p)))).collect();
            let named: Vec<Arc<SlimPod>> = on.iter().map(|(n, p)| bound_to(p, &view.nodes()[*n].name)).collect();
            let copies: Vec<Arc<SlimPod>> = on.iter().map(|(_, p)| unbound(p)).collect();
            let mut kind_of = |p: &Arc<SlimPod>| {
                let key = kind_key(p);
                *kinds.entry(key.clone()).or_insert_with(|| ranking.add_kind(&view, p, &key))
            };
            let ids: Vec<usize> = copies.iter().map(&mut kind_of).collect();
            assert_eq!(named.iter().map(&mut kind_of).collect::<Vec<_>>(), ids, "a pod's kind does not read its node");
            let mut taken = Vec::new();
            for &n in &removed {
                let pods = view.nodes()[n].pods.clone();
                pods.iter().for_each(|p| {
                    view.remove_pod(n, p);
                });
                view.set_hidden(n, true);
                taken.push((n, pods));
            }
            let copies_plain = replay(&mut view, &copies, None, None);
            assert_eq!(replay(&mut view, &named, None, None), copies_plain, "plain, nodes {removed:?} taken away");
            let named_ranked = replay(&mut view, &named, Some((&ranking, &ids)), None);
            assert_eq!(named_ranked, copies_plain, "ranked, nodes {removed:?} taken away");
            if copies_plain.is_ok() {
                bound += 1
            } else {
                refused += 1
            }
            for (n, pods) in taken.into_iter().rev() {
                view.set_hidden(n, false);
                pods.into_iter().for_each(|p| view.add_pod(n, p));
            }
        }
    }
    assert!(bound > 10 && refused > 5, "{bound} bound, {refused} refused");
}

#[test]
fn a_pod_prepared_from_filters_kept_from_an_earlier_view_state_answers_as_one_prepared_afresh() {
    // Filters kept for every pod up front; pods then come and go, nodes are hidden, one is
    // pushed: every node's verdict (and its words) must match a pod prepared from scratch.
    let mut rng = Lcg(31);
    let mut view = cluster(&mut rng, false);
    let pods: Vec<Arc<SlimPod>> = (0..40).map(|i| workload_pod(&mut rng, 3000 + i)).collect();
    let kept: Vec<_> = pods.iter().map(|p| view.pod_filters(p, None)).collect();
    let verdicts = |v: &ClusterView, pp: &PreparedPod<'_>| {
        (0..v.nodes().len()).map(|n| v.check_prepared(pp, n).map_err(|u| u.reason)).collect::<Vec<_>>()
    };
    let (mut fits, mut refusals) = (0, 0);
    for step in 0..30 {
        let n = rng.below(view.nodes().len());
        match (rng.below(4), view.nodes()[n].pods.len()) {
            (0, _) | (_, 0) => view.add_pod(n, workload_pod(&mut rng, 4000 + step)),
            (1, _) => view.set_hidden(n, !view.is_hidden(n)),
            (2, _) if step == 10 => {
                view.push_node(node("joined", &[(Z, "b")], &[("cpu", "4"), ("memory", "8Gi"), ("pods", "9")]));
            }
            (_, len) => {
                let p = Arc::clone(&view.nodes()[n].pods[rng.below(len)]);
                assert!(view.remove_pod(n, &p));
            }
        }
        for (i, (p, f)) in pods.iter().zip(&kept).enumerate() {
            let from_kept = verdicts(&view, &view.prepare_unbound_from(p, f));
            assert_eq!(from_kept, verdicts(&view, &view.prepare_unbound(p, None)), "step {step}, pod {i}");
            fits += from_kept.iter().filter(|v| v.is_ok()).count();
            refusals += from_kept.iter().filter(|v| v.is_err()).count();
        }
    }
    assert!(fits > 100 && refusals > 100, "{fits} fits, {refusals} refusals");
}

#[test]
fn a_views_requested_equals_its_pods_requests_summed_extended_resources_included() {
    // The view sums cpu, memory and pods apart from other resources: what it reports must be
    // the plain sum of its pods' requests as pods come and go.
    let mut rng = Lcg(41);
    let mut view = cluster(&mut rng, false);
    for step in 0..120 {
        let n = rng.below(view.nodes().len());
        match (rng.below(3), view.nodes()[n].pods.len()) {
            (0, _) | (_, 0) => {
                let b = pod(&format!("x{step}")).cpu("100m").memory("64Mi");
                let p = if step % 2 == 0 { b.request("vpc.amazonaws.com/pod-eni", "1").build() } else { b.build() };
                view.add_pod(n, p);
            }
            (_, len) => {
                let p = Arc::clone(&view.nodes()[n].pods[rng.below(len)]);
                assert!(view.remove_pod(n, &p));
            }
        }
    }
    let nonzero = |list: &kerf_api::ResourceList| {
        list.iter().filter(|(_, q)| !q.is_zero()).map(|(k, q)| (k.clone(), q.nanos())).collect::<Vec<_>>()
    };
    let mut extended = 0;
    for n in 0..view.nodes().len() {
        let summed = view.nodes()[n].pods.iter().fold(kerf_api::ResourceList::new(), |mut acc, p| {
            acc.add(&crate::pod::pod_requests(p));
            acc
        });
        assert_eq!(nonzero(&view.requested(n)), nonzero(&summed), "node {n}");
        extended += usize::from(!summed.get("vpc.amazonaws.com/pod-eni").is_zero());
    }
    assert!(extended > 3, "{extended} nodes hold pods asking for pod-eni");
}
