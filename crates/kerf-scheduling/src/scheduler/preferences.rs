//! Pod groups and preference relaxation: pods with identical constraints share one group, and
//! each group has levels — its constraints with preferences dropped one by one in Karpenter's
//! order (required node affinity terms in turn, preferred pod affinity, preferred
//! anti-affinity, preferred node affinity, ScheduleAnyway spread, PreferNoSchedule taints).

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeSet, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Toleration;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kerf_api::SlimPod;
use kerf_api::{Operator, labels};

use super::existing::Node;
use super::facts::PodFacts;
use super::facts::Pods;
use super::ids::{CounterIx, GroupIx, Idx, InverseIx, IxVec, LevelIx, NodeIx, PodIx, PoolIx};
use super::interning::Interned;
use super::pools::Pools;
use super::refusal::Why;
use super::topology::{AffinitySet, SpreadPlan, Topology, spread_domains};
use crate::model::{PreferencePolicy, SchedulingInput};
use crate::pod::{self, AffinityTerm, HostPort, Namespaces, SpreadConstraint};
use crate::requirements::{Requirement, Requirements};

#[derive(Clone)]
pub(super) struct Level {
    /// The pod's node requirements at this level.
    pub(super) req: u32,
    pub(super) name_field: Option<Requirement>,
    pub(super) tolerate_prefer: bool,
    pub(super) spreads: Vec<SpreadPlan>,
    /// The required affinity terms as one set, and each still-preferred term as a set of its own.
    pub(super) affinity: Vec<AffinitySet>,
    pub(super) anti: Vec<CounterIx>,
    /// Relaxation state that produced this level.
    pub(super) state: Relax,
    /// Human description of what was relaxed to reach this level.
    pub(super) relaxed: Option<String>,
}

#[derive(Clone, Copy, Default)]
pub(super) struct Relax {
    pub(super) term: usize,
    pub(super) pref_affinity: usize,
    pub(super) pref_anti: usize,
    pub(super) pref_node: usize,
    pub(super) soft_spread: usize,
    pub(super) tolerate_prefer: bool,
}

pub(super) struct Group {
    pub(super) rep: Arc<SlimPod>,
    /// The context index of `rep`.
    pub(super) rep_index: PodIx,
    pub(super) tolerations: Vec<Toleration>,
    pub(super) terms: Vec<Requirements>,
    pub(super) name_fields: Vec<Option<Requirement>>,
    pub(super) pref_node: Vec<(i32, Requirements)>,
    pub(super) hard_spread: Vec<SpreadConstraint>,
    pub(super) soft_spread: Vec<SpreadConstraint>,
    pub(super) affinity: Vec<AffinityTerm>,
    pub(super) anti: Vec<AffinityTerm>,
    pub(super) pref_affinity: Vec<AffinityTerm>,
    pub(super) pref_anti: Vec<AffinityTerm>,
    pub(super) ports: Vec<HostPort>,
    /// The zones the volumes the pods mount allow.
    pub(super) volumes: GroupVolumes,
    /// What the context works out for the group: topology links, levels, verdicts.
    pub(super) state: GroupState,
}

/// The zones the volumes a group's pods mount allow.
pub(super) struct GroupVolumes {
    /// Every volume's alternatives united, the volumes combined.
    pub(super) volume: Option<Requirements>,
    pub(super) volume_alts: Vec<Vec<Requirements>>,
    /// Why a volume the pods mount cannot be resolved (they are not placed).
    pub(super) unresolvable: Option<String>,
}

/// What the context works out for a group: the topology counters and terms it is linked to
/// (at build), its levels (as they are needed) and the verdicts cached per level.
#[derive(Default)]
pub(super) struct GroupState {
    /// Counters this group's pods count toward.
    pub(super) counted_by: Vec<CounterIx>,
    /// Anti-affinity terms (of others) that reject this group's pods.
    pub(super) rejected_by: Vec<InverseIx>,
    /// This group's own required anti-affinity terms, as inverse ids.
    pub(super) own_inverse: Vec<InverseIx>,
    pub(super) levels: IxVec<LevelIx, Arc<Level>>,
    /// Per level, per existing node: taints, node affinity and volume zones allow it.
    pub(super) node_ok: IxVec<LevelIx, IxVec<NodeIx, bool>>,
    /// Per level, per pool: whether its taints and requirements take the pods, once asked
    /// (see `pool_fit`).
    pub(super) admits: IxVec<LevelIx, IxVec<PoolIx, Option<Result<(), Why>>>>,
    pub(super) exhausted: bool,
    /// The running query's claims that never accept this group (level 0), as a bit set over
    /// claim indexes (see `room`).
    pub(super) refused: Vec<u64>,
}

impl Group {
    /// Whether the pods prefer something of each node on its own: a preferred pod affinity or
    /// anti-affinity term, or a ScheduleAnyway spread, over `kubernetes.io/hostname`. Honoured
    /// on new capacity, such a preference buys a node per pod; these pods take the room that is
    /// there first (see `placement`).
    pub(super) fn prefers_per_node(&self) -> bool {
        self.pref_affinity.iter().chain(&self.pref_anti).any(|t| t.topology_key == labels::HOSTNAME)
            || self.soft_spread.iter().any(|c| c.topology_key == labels::HOSTNAME)
    }

    /// Whether a level's relaxation `s` dropped only per-node preferences (required node
    /// affinity terms taken in turn are alternatives, not preferences): the levels at which these
    /// pods may take room that is there rather than a new claim.
    pub(super) fn relaxes_only_per_node(&self, s: &Relax) -> bool {
        let per_node = |t: &AffinityTerm| t.topology_key == labels::HOSTNAME;
        self.pref_affinity[..s.pref_affinity].iter().all(per_node)
            && self.pref_anti[..s.pref_anti].iter().all(per_node)
            && s.pref_node == 0
            && self.soft_spread[..s.soft_spread].iter().all(|c| c.topology_key == labels::HOSTNAME)
            && !s.tolerate_prefer
    }
}

/// One requirement set standing for alternatives (a volume's node affinity terms): when every
/// alternative constrains only the same single key with finite values (the usual zone list),
/// their union; otherwise the first alternative.
pub(super) fn volume_union(alts: &[Requirements]) -> Requirements {
    let single_key = alts.first().and_then(|a| (a.len() == 1).then(|| a.keys().next().cloned()).flatten());
    if let Some(key) = single_key {
        let mut values: BTreeSet<String> = BTreeSet::new();
        let mut ok = true;
        for a in alts {
            match (a.len() == 1, a.get(&key).and_then(|r| r.values())) {
                (true, Some(v)) => values.extend(v.iter().cloned()),
                _ => ok = false,
            }
        }
        if ok {
            let values: Vec<String> = values.into_iter().collect();
            let mut r = Requirements::new();
            r.add(&key, Requirement::new(Operator::In, &values));
            return r;
        }
    }
    alts.first().cloned().unwrap_or_default()
}

/// Whether two pods (same namespace and labels; `fa`, `fb` their facts) have the same scheduling
/// constraints.
pub(super) fn same_constraints(a: &SlimPod, fa: &PodFacts, b: &SlimPod, fb: &PodFacts) -> bool {
    let (Some(x), Some(y)) = (&a.spec, &b.spec) else { return a.spec.is_none() && b.spec.is_none() };
    pod::namespace(a) == pod::namespace(b)
        && pod::labels(a) == pod::labels(b)
        && x.node_selector == y.node_selector
        && x.affinity == y.affinity
        && x.tolerations == y.tolerations
        && x.topology_spread_constraints == y.topology_spread_constraints
        // `nodeName` is a binding, not a constraint the Scheduler places by: pods on existing
        // nodes differ in it and still move alike.
        && x.volumes == y.volumes
        // Generic ephemeral volumes are claims named after the pod: such pods stand alone.
        && (x.volumes.iter().flatten().all(|v| v.ephemeral.is_none()) || a.metadata.name == b.metadata.name)
        && fa.ports == fb.ports
}

/// The groups of every pod of `input` (pending pods first, then the pods on existing nodes; each
/// pod's group is pushed to `of.group`), with the counters and anti-affinity terms of `topology`
/// each group counts in and is blocked by.
pub(super) fn build_groups(input: &SchedulingInput, of: &mut Pods, topology: &mut Topology) -> IxVec<GroupIx, Group> {
    let mut groups: IxVec<GroupIx, Group> = IxVec::default();
    let mut buckets: HashMap<u64, Vec<GroupIx>> = HashMap::new();
    let existing = std::mem::take(&mut of.existing);
    // Pods the facts cache sorted into constraint classes are grouped by class: equal
    // classes are equal constraints, and a pod with a class never has the constraints of a
    // pod without one (those have no spec or stand alone), so no comparison is needed.
    let mut by_class: HashMap<u64, GroupIx> = HashMap::new();
    for (pi, p) in input.pods.iter().chain(&existing).enumerate() {
        let pi = PodIx::new(pi);
        if let Some(class) = of.facts[pi].class {
            let g = match by_class.get(&class) {
                Some(g) => *g,
                None => {
                    let g = groups.push(make_group(input, &of.facts[pi], pi, p.clone()));
                    by_class.insert(class, g);
                    g
                }
            };
            of.group.push(g);
            continue;
        }
        let mut h = DefaultHasher::new();
        pod::namespace(p).hash(&mut h);
        pod::labels(p).hash(&mut h);
        let candidates = buckets.entry(h.finish()).or_default();
        let facts = &of.facts;
        let found = candidates.iter().copied().find(|g| {
            let rep = groups[*g].rep_index;
            same_constraints(&groups[*g].rep, &facts[rep], p, &facts[pi])
        });
        let g = match found {
            Some(g) => g,
            None => {
                let g = groups.push(make_group(input, &of.facts[pi], pi, p.clone()));
                candidates.push(g);
                g
            }
        };
        of.group.push(g);
    }
    of.existing = existing;
    // Counters and inverse terms for every constraint any group may use.
    for g in groups.indices() {
        let grp = &groups[g];
        let terms: Vec<(String, Option<LabelSelector>, Namespaces)> = grp
            .hard_spread
            .iter()
            .chain(&grp.soft_spread)
            .map(|c| {
                (
                    c.topology_key.clone(),
                    c.selector.clone(),
                    Namespaces::Some { names: vec![c.namespace.clone()], selector: None },
                )
            })
            .chain(
                grp.affinity
                    .iter()
                    .chain(&grp.anti)
                    .chain(&grp.pref_affinity)
                    .chain(&grp.pref_anti)
                    .map(|t| (t.topology_key.clone(), t.selector.clone(), t.namespaces.clone())),
            )
            .collect();
        for (k, s, n) in terms {
            topology.counter_id(&k, &s, &n);
        }
        // The required affinity terms count together (before `counted_by` is computed).
        let required = groups[g].affinity.clone();
        for i in 0..required.len() {
            topology.set_counter_id(&required, i);
        }
        let anti = groups[g].anti.clone();
        let own: Vec<InverseIx> = anti.iter().map(|t| topology.inverse_id(t)).collect();
        groups[g].state.own_inverse = own;
    }
    let ns = &input.namespace_labels;
    for g in groups.indices() {
        let rep = groups[g].rep.clone();
        groups[g].state.counted_by =
            topology.counters.indices().filter(|c| topology.counters[*c].matches(&rep, ns)).collect();
        groups[g].state.rejected_by = topology
            .inverses
            .indices()
            .filter(|i| {
                let inv = &topology.inverses[*i];
                AffinityTerm {
                    topology_key: inv.key.clone(),
                    selector: inv.selector.clone(),
                    namespaces: inv.namespaces.clone(),
                    weight: 0,
                }
                .matches(&rep, ns)
            })
            .collect();
    }
    groups
}

/// The group of pod `pi` (`p`, of `facts`) in `input`.
fn make_group(input: &SchedulingInput, facts: &PodFacts, pi: PodIx, p: Arc<SlimPod>) -> Group {
    let c = facts.constraints(&p);
    let aff = &c.affinities;
    // Under `Ignore` the plan knows of no preference at all.
    let prefer = input.preference_policy != PreferencePolicy::Ignore;
    let mut pref_affinity = if prefer { aff.preferred.clone() } else { Vec::new() };
    pref_affinity.sort_by_key(|t| std::cmp::Reverse(t.weight));
    let mut pref_anti = if prefer { aff.preferred_anti.clone() } else { Vec::new() };
    pref_anti.sort_by_key(|t| std::cmp::Reverse(t.weight));
    let spreads = &c.spreads;
    let volume_alts: Vec<Vec<Requirements>> = c
        .volume_claims
        .iter()
        .filter_map(|c| input.volume_requirements.get(c).cloned())
        .filter(|alts| !alts.is_empty())
        .collect();
    let volume = if volume_alts.is_empty() {
        None
    } else {
        let mut r = Requirements::new();
        for alts in &volume_alts {
            r.add_all(&volume_union(alts));
        }
        Some(r)
    };
    let unresolvable = c.volume_claims.iter().find_map(|c| input.unresolvable_volumes.get(c).cloned());
    Group {
        tolerations: c.tolerations.clone(),
        terms: c.terms.clone(),
        name_fields: c.name_fields.clone(),
        pref_node: if prefer { c.pref_node.clone() } else { Vec::new() },
        hard_spread: spreads.iter().filter(|c| c.hard).cloned().collect(),
        soft_spread: spreads.iter().filter(|c| prefer && !c.hard).cloned().collect(),
        affinity: aff.required.clone(),
        anti: aff.required_anti.clone(),
        pref_affinity,
        pref_anti,
        ports: facts.ports.clone(),
        volumes: GroupVolumes { volume, volume_alts, unresolvable },
        state: GroupState::default(),
        rep: p,
        rep_index: pi,
    }
}

/// What building a group's level reads (the input, the nodes and pools spread domains come from)
/// and interns into (requirement sets, topology counters).
pub(super) struct LevelParts<'a> {
    pub(super) input: &'a SchedulingInput,
    pub(super) nodes: &'a IxVec<NodeIx, Node>,
    pub(super) pools: &'a Pools,
    /// Whether any pool or node has a PreferNoSchedule taint (else that relaxation is moot).
    pub(super) prefer_taints: bool,
    pub(super) interned: &'a mut Interned,
    pub(super) topology: &'a mut Topology,
}

impl Group {
    /// The group's level `l`, building it (by relaxing the previous level, from `parts`) when
    /// needed. `None` when nothing is left to relax.
    pub(super) fn level(&mut self, l: LevelIx, parts: &mut LevelParts<'_>) -> Option<LevelIx> {
        while self.state.levels.len() <= l.ix() {
            if self.state.exhausted {
                return None;
            }
            let next = match self.state.levels.last() {
                None => Some((Relax::default(), None)),
                Some(prev) => self.relax(prev.state, parts.prefer_taints),
            };
            match next {
                Some((state, why)) => {
                    let level = self.build_level(state, why, parts);
                    self.state.levels.push(Arc::new(level));
                }
                None => {
                    self.state.exhausted = true;
                    return None;
                }
            }
        }
        Some(l)
    }

    /// The next relaxation in Karpenter's order (PreferNoSchedule taints only when some pool or
    /// node has one: `prefer_taints`).
    fn relax(&self, s: Relax, prefer_taints: bool) -> Option<(Relax, Option<String>)> {
        let grp = self;
        let mut n = s;
        if s.term + 1 < grp.terms.len() {
            n.term += 1;
            return Some((n, Some(format!("dropped required node affinity term {}", s.term + 1))));
        }
        if s.pref_affinity < grp.pref_affinity.len() {
            n.pref_affinity += 1;
            return Some((n, Some("dropped a preferred pod affinity term".into())));
        }
        if s.pref_anti < grp.pref_anti.len() {
            n.pref_anti += 1;
            return Some((n, Some("dropped a preferred pod anti-affinity term".into())));
        }
        if s.pref_node < grp.pref_node.len() {
            n.pref_node += 1;
            return Some((n, Some("dropped a preferred node affinity term".into())));
        }
        if s.soft_spread < grp.soft_spread.len() {
            n.soft_spread += 1;
            return Some((n, Some("dropped a ScheduleAnyway topology spread constraint".into())));
        }
        if !s.tolerate_prefer && prefer_taints {
            n.tolerate_prefer = true;
            return Some((n, Some("tolerated PreferNoSchedule taints".into())));
        }
        None
    }

    /// The group's level at relaxation `s` (`relaxed`: what was dropped to reach it).
    fn build_level(&self, s: Relax, relaxed: Option<String>, parts: &mut LevelParts<'_>) -> Level {
        let grp = self;
        let mut r = grp.terms.get(s.term).cloned().unwrap_or_default();
        if let Some((_, pref)) = grp.pref_node.get(s.pref_node) {
            r.add_all(pref);
        }
        if let Some(v) = &grp.volumes.volume {
            r.add_all(v);
        }
        let name_field = grp.name_fields.get(s.term).cloned().flatten();
        let input = parts.input;
        let ns = &input.namespace_labels;
        let rep = grp.rep.clone();
        let spreads: Vec<(SpreadConstraint, bool)> = grp
            .hard_spread
            .iter()
            .map(|c| (c.clone(), false))
            .chain(grp.soft_spread.iter().skip(s.soft_spread).map(|c| (c.clone(), true)))
            .collect();
        let required_aff = grp.affinity.clone();
        let preferred_aff: Vec<AffinityTerm> = grp.pref_affinity.iter().skip(s.pref_affinity).cloned().collect();
        let anti_terms: Vec<AffinityTerm> =
            grp.anti.iter().chain(grp.pref_anti.iter().skip(s.pref_anti)).cloned().collect();
        let tolerations = grp.tolerations.clone();
        // Spread domains honour the pod's required node affinity — every term, OR'ed, as
        // kube-scheduler's nodeAffinityPolicy Honor does — never a preferred term.
        let terms = grp.terms.clone();
        let req = parts.interned.intern_req(r.clone());
        let mut plans = Vec::new();
        for (c, _soft) in spreads {
            let counter = parts.topology.counter_id(
                &c.topology_key,
                &c.selector,
                &Namespaces::Some { names: vec![c.namespace.clone()], selector: None },
            );
            let (support, fresh) =
                spread_domains(parts.nodes, parts.pools, &mut parts.interned.values, &c, &terms, &tolerations);
            plans.push(SpreadPlan {
                counter,
                key: c.topology_key.clone(),
                max_skew: i64::from(c.max_skew),
                self_match: i64::from(c.counts(&rep)),
                min_domains: c.min_domains.map(i64::from),
                domains: support.keys().copied().collect(),
                node_support: support.values().map(|(n, _)| *n).collect(),
                from_pool: support.values().map(|(_, p)| *p).collect(),
                fresh,
            });
        }
        // Preferred terms are scored one by one by kube-scheduler: while kept, each holds alone.
        let mut affinity = Vec::new();
        if !required_aff.is_empty() {
            affinity.push(AffinitySet {
                counters: (0..required_aff.len()).map(|i| parts.topology.set_counter_id(&required_aff, i)).collect(),
                matches_own: required_aff.iter().all(|t| t.matches(&rep, ns)),
            });
        }
        for t in &preferred_aff {
            affinity.push(AffinitySet {
                counters: vec![parts.topology.counter_id(&t.topology_key, &t.selector, &t.namespaces)],
                matches_own: t.matches(&rep, ns),
            });
        }
        let anti: Vec<CounterIx> =
            anti_terms.iter().map(|t| parts.topology.counter_id(&t.topology_key, &t.selector, &t.namespaces)).collect();
        Level { req, name_field, tolerate_prefer: s.tolerate_prefer, spreads: plans, affinity, anti, state: s, relaxed }
    }
}
