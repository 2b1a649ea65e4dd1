//! What a context takes over from an earlier one instead of working it out again. Disruption builds
//! a context per evaluation after every change, and consecutive evaluations see clusters that
//! differ in a few nodes: reading every pod's facts from the [`PodFactsCache`] (a lookup per pod)
//! is a large part of a build. A node of the new input that holds the very same pods (by
//! identity, in the same order) as a node of the earlier context's input takes their facts from
//! it; only the other pods go through the cache. What is taken is what the build would have
//! read: facts are read from the cache by what they are parsed from, which an identical pod has
//! unchanged. (Dense requests are not taken: a build works them out once per distinct facts,
//! see `request_rows`.)

use std::sync::Arc;

use kerf_api::SlimPod;

use super::facts::{self, PodFacts, PodFactsCache};
use super::ids::{Idx, IxVec, PodIx};
use crate::model::SchedulingInput;

/// What a context takes over from an earlier one: the parts of the earlier context it reads.
pub(super) struct Earlier {
    pub(super) input: Arc<SchedulingInput>,
    /// Its pods' facts.
    pub(super) facts: IxVec<PodIx, Arc<PodFacts>>,
}

/// The facts of `input`'s pods laid out as a build lays them out (pending pods first, then
/// `existing`: each existing node's pods in turn), those of nodes `earlier` had with the same
/// pods taken from it, the others read through `cache`.
pub(super) fn facts_from(
    input: &SchedulingInput,
    existing: &[Arc<SlimPod>],
    cache: Option<&PodFactsCache>,
    earlier: Earlier,
) -> Vec<Arc<PodFacts>> {
    let total = input.pods.len() + existing.len();
    let mut out: Vec<Option<Arc<PodFacts>>> = vec![None; total];
    let old_input = Arc::clone(&earlier.input);
    let old_ranges = facts::existing_pod_ranges(&old_input);
    let position: std::collections::HashMap<&str, usize> =
        old_input.existing_nodes.iter().enumerate().map(|(j, n)| (n.name.as_str(), j)).collect();
    for (n, range) in input.existing_nodes.iter().zip(facts::existing_pod_ranges(input)) {
        let Some(&j) = position.get(n.name.as_str()) else { continue };
        if !old_input.existing_nodes[j].holds_same_pods(n) {
            continue;
        }
        for (new, old) in range.zip(old_ranges[j].clone()) {
            out[new] = Some(Arc::clone(&earlier.facts[PodIx::new(old)]));
        }
    }
    drop(earlier);
    let pod = |pi: usize| if pi < input.pods.len() { &input.pods[pi] } else { &existing[pi - input.pods.len()] };
    let missing: Vec<usize> = (0..total).filter(|&pi| out[pi].is_none()).collect();
    let read = facts::gather_some(missing.iter().map(|&pi| pod(pi)), cache);
    for (pi, f) in missing.into_iter().zip(read) {
        out[pi] = Some(f);
    }
    // Every pod's facts are there now: taken over, or read just above.
    let facts: Vec<Arc<PodFacts>> = out.into_iter().flatten().collect();
    debug_assert_eq!(facts.len(), total);
    facts
}

#[cfg(test)]
mod tests {
    use kerf_api::labels::{HOSTNAME, ZONE};

    use super::*;
    use crate::SchedulingContext;
    use crate::model::ExistingNode;
    use crate::testing::*;

    fn zone_node(name: &str, zone: &str, pods: Vec<Arc<SlimPod>>) -> ExistingNode {
        let mut n = node(name, &[(ZONE, zone)], &[("cpu", "8"), ("memory", "16Gi"), ("pods", "80")]);
        n.node_pool = Some("default".into());
        n.pods = pods;
        n
    }

    fn web(name: &str, cpu: &str) -> Arc<SlimPod> {
        pod(name).label("app", "web").spread(ZONE, 1, &[("app", "web")]).cpu(cpu).version(name, "1").build()
    }

    fn db(name: &str) -> Arc<SlimPod> {
        pod(name).label("app", "db").anti_affinity(HOSTNAME, &[("app", "db")]).cpu("1").version(name, "1").build()
    }

    /// Everything a context answers about `input`: its pods' groups and dense requests, the
    /// placing of the pending pods, and the what-if without each node and without all of them.
    fn answers(ctx: &mut SchedulingContext, input: &SchedulingInput) -> Vec<String> {
        let mut out = vec![
            format!("{:?}", ctx.pod_groups()),
            format!("{:?} {:?}", ctx.res.names, ctx.pods.requests.iter().collect::<Vec<_>>()),
            format!("{:?}", ctx.place_pending()),
        ];
        let names: Vec<&str> = input.existing_nodes.iter().map(|n| n.name.as_str()).collect();
        for n in &names {
            out.push(format!("{n}: {:?}", ctx.without_nodes(&[n])));
        }
        out.push(format!("all: {:?}", ctx.without_nodes(&names)));
        out
    }

    #[test]
    fn a_context_taking_over_an_earlier_ones_pods_answers_as_one_built_afresh() {
        let (w1, w2, d1, plain) = (web("w1", "1"), web("w2", "2"), db("d1"), pod("plain").cpu("3").build());
        let mut input = small_large_cluster(vec![
            zone_node("n1", "a", vec![Arc::clone(&w1), Arc::clone(&d1)]),
            zone_node("n2", "b", vec![Arc::clone(&w2)]),
            zone_node("n3", "c", vec![Arc::clone(&plain)]),
            zone_node("n4", "a", vec![db("d2")]),
        ]);
        input.pods = vec![web("w3", "1"), db("d3")];
        let cache = PodFactsCache::new();
        let earlier = SchedulingContext::with_facts(input.clone(), &cache);
        // n2's and n3's pods are taken over (their facts are the very ones).
        let kept: Vec<usize> =
            [4, 5].iter().map(|&pi| Arc::as_ptr(&earlier.pods.facts[PodIx::new(pi)]) as usize).collect();

        // A node gone, one joined, a pod moved as a running command moves it (a new copy), a
        // node relabelled, a new pending pod; n2 and n3 keep their very pods.
        input.existing_nodes.remove(3);
        input.existing_nodes[0].pods = vec![Arc::clone(&d1)];
        input.existing_nodes.push(zone_node("n5", "b", vec![Arc::new(SlimPod::clone(&w1)), db("d4")]));
        input.existing_nodes[2].labels.to_mut().insert(ZONE.to_string(), "b".to_string());
        input.pods.push(web("w4", "2"));
        let input = Arc::new(input);
        let mut taken = SchedulingContext::with_facts_from(Arc::clone(&input), &cache, earlier);
        let at: Vec<usize> = [4, 5].iter().map(|&pi| Arc::as_ptr(&taken.pods.facts[PodIx::new(pi)]) as usize).collect();
        assert_eq!(at, kept, "n2's and n3's facts are taken over");
        let mut fresh = SchedulingContext::with_facts(Arc::clone(&input), &PodFactsCache::new());
        assert_eq!(answers(&mut taken, &input), answers(&mut fresh, &input));

        // A pod asking for a resource no pod asked for before: other resource names (other
        // rows of dense requests), and the answers are still the same.
        let mut next = SchedulingInput::clone(&input);
        next.existing_nodes[1].pods.push(pod("gpu").request("example.com/gpu", "1").build());
        let mut taken = SchedulingContext::with_facts_from(next.clone(), &cache, taken);
        let mut fresh = SchedulingContext::with_facts(next.clone(), &PodFactsCache::new());
        assert_eq!(answers(&mut taken, &next), answers(&mut fresh, &next));
    }
}
