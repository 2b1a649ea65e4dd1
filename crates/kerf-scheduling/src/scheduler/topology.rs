//! Topology bookkeeping: counters of matching pods per domain (spread and pod affinity),
//! anti-affinity blocks per domain, spread plans and their domains, and counting a pod in or
//! out of a node's domains (journaled, so a query can take it back).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Toleration;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kerf_api::SlimPod;
use kerf_api::labels::{CAPACITY_TYPE, HOSTNAME, ZONE};

use super::existing::Node;
use super::ids::{CounterIx, InverseIx, IxVec, NodeIx};
use super::interning::Interner;
use super::journal::Undo;
use super::pools::Pools;
use crate::pod::{self, AffinityTerm, Namespaces, SpreadConstraint};
use crate::requirements::Requirements;

/// The topology counters and anti-affinity blocks of the cluster, by id.
#[derive(Default)]
pub(super) struct Topology {
    pub(super) counters: IxVec<CounterIx, Counter>,
    pub(super) inverses: IxVec<InverseIx, Inverse>,
}

/// A counter of pods matching a selector (and every one of `also`), per topology domain.
pub(super) struct Counter {
    pub(super) key: String,
    pub(super) selector: Option<LabelSelector>,
    pub(super) namespaces: Namespaces,
    /// Further terms a pod must match to count: the other terms of a pod's required affinity,
    /// since kube-scheduler counts, in each term's domain, the pods that match all of them.
    pub(super) also: Vec<(Option<LabelSelector>, Namespaces)>,
    pub(super) counts: Vec<i64>,
    pub(super) total: i64,
}

impl Counter {
    pub(super) fn get(&self, d: u32) -> i64 {
        self.counts.get(d as usize).copied().unwrap_or(0)
    }
    pub(super) fn add(&mut self, d: u32, delta: i64) {
        let i = d as usize;
        if self.counts.len() <= i {
            self.counts.resize(i + 1, 0);
        }
        self.counts[i] += delta;
        self.total += delta;
    }
    pub(super) fn matches(&self, p: &SlimPod, ns_labels: &BTreeMap<String, BTreeMap<String, String>>) -> bool {
        let term = |selector: &Option<LabelSelector>, namespaces: &Namespaces| AffinityTerm {
            topology_key: self.key.clone(),
            selector: selector.clone(),
            namespaces: namespaces.clone(),
            weight: 0,
        };
        term(&self.selector, &self.namespaces).matches(p, ns_labels)
            && self.also.iter().all(|(s, n)| term(s, n).matches(p, ns_labels))
    }
}

/// Pod affinity terms that hold together: for each term, the candidate's domain must hold a pod
/// matching every term of the set, unless no pod anywhere does and the pod itself matches them
/// all (the first of its kind may go anywhere its topology keys exist).
#[derive(Clone)]
pub(super) struct AffinitySet {
    /// One counter per term: pods matching every term of the set, in that term's domains.
    pub(super) counters: Vec<CounterIx>,
    pub(super) matches_own: bool,
}

/// Domains where pods matching an anti-affinity term are not allowed: per domain, how many
/// pods holding the term are there (a count, so a what-if can take a pod away again).
pub(super) struct Inverse {
    pub(super) key: String,
    pub(super) selector: Option<LabelSelector>,
    pub(super) namespaces: Namespaces,
    pub(super) blocked: Vec<i64>,
}

impl Inverse {
    pub(super) fn is_blocked(&self, d: u32) -> bool {
        self.blocked.get(d as usize).copied().unwrap_or(0) > 0
    }
    pub(super) fn block(&mut self, d: u32, delta: i64) {
        let i = d as usize;
        if self.blocked.len() <= i {
            self.blocked.resize(i + 1, 0);
        }
        self.blocked[i] += delta;
    }
}

#[derive(Clone)]
pub(super) struct SpreadPlan {
    pub(super) counter: CounterIx,
    pub(super) key: String,
    pub(super) max_skew: i64,
    pub(super) self_match: i64,
    pub(super) min_domains: Option<i64>,
    /// Domains the pod could land in (sorted).
    pub(super) domains: Vec<u32>,
    /// Per domain: how many existing nodes are in it, and whether a NodePool can launch in it
    /// (a what-if that removes every node of a domain no pool offers removes the domain).
    pub(super) node_support: Vec<u32>,
    pub(super) from_pool: Vec<bool>,
    /// A new node is a fresh, empty domain (hostname): the minimum is 0.
    pub(super) fresh: bool,
}

impl Topology {
    pub(super) fn counter_id(
        &mut self,
        key: &str,
        selector: &Option<LabelSelector>,
        namespaces: &Namespaces,
    ) -> CounterIx {
        self.counter_id_with(key, selector, namespaces, Vec::new())
    }

    pub(super) fn counter_id_with(
        &mut self,
        key: &str,
        selector: &Option<LabelSelector>,
        namespaces: &Namespaces,
        also: Vec<(Option<LabelSelector>, Namespaces)>,
    ) -> CounterIx {
        if let Some(i) = self
            .counters
            .position(|c| c.key == key && c.selector == *selector && c.namespaces == *namespaces && c.also == also)
        {
            return i;
        }
        self.counters.push(Counter {
            key: key.to_string(),
            selector: selector.clone(),
            namespaces: namespaces.clone(),
            also,
            counts: Vec::new(),
            total: 0,
        })
    }

    /// The counter of term `i` of an affinity set: pods matching every term, in term `i`'s
    /// domains (a plain per-term counter when the set has one term).
    pub(super) fn set_counter_id(&mut self, terms: &[AffinityTerm], i: usize) -> CounterIx {
        let also = terms
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != i)
            .map(|(_, t)| (t.selector.clone(), t.namespaces.clone()))
            .collect();
        let t = &terms[i];
        self.counter_id_with(&t.topology_key, &t.selector, &t.namespaces, also)
    }

    pub(super) fn inverse_id(&mut self, t: &AffinityTerm) -> InverseIx {
        if let Some(i) = self
            .inverses
            .position(|c| c.key == t.topology_key && c.selector == t.selector && c.namespaces == t.namespaces)
        {
            return i;
        }
        self.inverses.push(Inverse {
            key: t.topology_key.clone(),
            selector: t.selector.clone(),
            namespaces: t.namespaces.clone(),
            blocked: Vec::new(),
        })
    }

    /// Adds `delta` to counter `c` in domain `d`, recorded in the journal.
    pub(super) fn count(&mut self, journal: &mut Vec<Undo>, c: CounterIx, d: u32, delta: i64) {
        self.counters[c].add(d, delta);
        journal.push(Undo::Count { counter: c, domain: d, delta });
    }

    /// Adds `delta` to inverse term `i` in domain `d`, recorded in the journal.
    pub(super) fn block(&mut self, journal: &mut Vec<Undo>, i: InverseIx, d: u32, delta: i64) {
        self.inverses[i].block(d, delta);
        journal.push(Undo::Block { inverse: i, domain: d, delta });
    }
}

impl Topology {
    /// Counts a pod (`delta` = 1) or takes it away (`delta` = -1) in the domains of existing
    /// `node`: in every counter it matches (`counted_by`) and every anti-affinity term it holds
    /// (`own_inverse`), recorded in `journal`.
    pub(super) fn count_pod(
        &mut self,
        journal: &mut Vec<Undo>,
        node: &Node,
        values: &Interner,
        counted_by: &[CounterIx],
        own_inverse: &[InverseIx],
        delta: i64,
    ) {
        for &c in counted_by {
            if let Some(d) = node.domain(values, &self.counters[c].key) {
                self.count(journal, c, d, delta);
            }
        }
        for &i in own_inverse {
            if let Some(d) = node.domain(values, &self.inverses[i].key) {
                self.block(journal, i, d, delta);
            }
        }
    }

    /// The least count of spread plan `s`'s counter over its domains (those still alive in the
    /// running what-if, `gone`; label values interned in `values`), or 0 when fewer domains than
    /// its minimum are left.
    pub(super) fn spread_min(&self, s: &SpreadPlan, gone: Gone, values: &Interner) -> i64 {
        if s.fresh {
            return 0;
        }
        let c = &self.counters[s.counter];
        if gone.nodes.is_empty() {
            if let Some(md) = s.min_domains
                && (s.domains.len() as i64) < md
            {
                return 0;
            }
            return s.domains.iter().map(|d| c.get(*d)).min().unwrap_or(0);
        }
        let alive = || (0..s.domains.len()).filter(|i| gone.domain_alive(s, *i, values)).map(|i| s.domains[i]);
        if let Some(md) = s.min_domains
            && (alive().count() as i64) < md
        {
            return 0;
        }
        alive().map(|d| c.get(d)).min().unwrap_or(0)
    }

    /// Whether a pod of spread plan `s` may go to domain `d` (the skew it would make holds; see
    /// [`spread_min`](Self::spread_min)).
    pub(super) fn spread_allows(&self, s: &SpreadPlan, d: u32, gone: Gone, values: &Interner) -> bool {
        if !s.fresh && !s.domains.contains(&d) {
            return false;
        }
        crate::fit::spread_skew_ok(
            self.counters[s.counter].get(d),
            s.self_match,
            self.spread_min(s, gone, values),
            s.max_skew,
        )
    }

    /// Spread plan `s`'s counts in its domains (named by `values`), in words.
    pub(super) fn spread_counts(&self, s: &SpreadPlan, values: &Interner) -> String {
        let c = &self.counters[s.counter];
        let counts: Vec<String> = s.domains.iter().map(|d| format!("{}: {}", values.name(*d), c.get(*d))).collect();
        format!(
            "key {} maxSkew {}, counts in reachable domains {{{}}}{}",
            s.key,
            s.max_skew,
            counts.join(", "),
            if s.fresh { " plus an empty new node" } else { "" }
        )
    }
}

/// The nodes the running what-if took away (`nodes`, none outside a what-if) among `all`: a
/// spread domain only they provided no longer counts.
#[derive(Clone, Copy)]
pub(super) struct Gone<'a> {
    pub(super) nodes: &'a [NodeIx],
    pub(super) all: &'a IxVec<NodeIx, Node>,
}

impl Gone<'_> {
    /// Whether domain `i` of spread plan `s` still exists in the running what-if: a pool offers
    /// it, or some node in it is not removed.
    fn domain_alive(&self, s: &SpreadPlan, i: usize, values: &Interner) -> bool {
        let d = s.domains[i];
        s.from_pool[i]
            || (self.nodes.iter().filter(|n| self.all[**n].domain(values, &s.key) == Some(d)).count() as u32)
                < s.node_support[i]
    }
}

/// The domains of a spread constraint the pod could land in: existing nodes passing its
/// required node affinity (any of its `terms`; Honor) and taints (Honor), and the values
/// NodePools compatible with some term can launch. For hostname, a new node is a fresh empty
/// domain.
/// Each domain comes with its number of existing nodes and whether a pool offers it.
pub(super) fn spread_domains(
    nodes: &IxVec<NodeIx, Node>,
    pools: &Pools,
    values: &mut Interner,
    c: &SpreadConstraint,
    terms: &[Requirements],
    tols: &[Toleration],
) -> (BTreeMap<u32, (u32, bool)>, bool) {
    let mut out: BTreeMap<u32, (u32, bool)> = BTreeMap::new();
    let mut fresh = false;
    for n in nodes {
        let Some(v) = n.labels.get(&c.topology_key) else { continue };
        if c.honor_node_affinity && !terms.iter().any(|r| r.matches(&n.labels)) {
            continue;
        }
        if c.honor_node_taints && pod::untolerated_taint_with(tols, &n.taints, false).is_some() {
            continue;
        }
        out.entry(values.id(v)).or_default().0 += 1;
    }
    let key = kerf_api::labels::normalize_key(&c.topology_key).to_string();
    for pool in &pools.all {
        if c.honor_node_taints && pod::untolerated_taint_with(tols, &pool.rules.taints, false).is_some() {
            continue;
        }
        let combined: Vec<Requirements> = if c.honor_node_affinity {
            terms
                .iter()
                .filter(|r| pool.rules.reqs.compatible_strict(r, |k| pool.table.type_keys.contains(k)).is_ok())
                .map(|r| pool.rules.reqs.intersect(r))
                .collect()
        } else {
            vec![pool.rules.reqs.clone()]
        };
        if combined.is_empty() {
            continue;
        }
        if key == HOSTNAME {
            fresh = true;
            continue;
        }
        let mut vals: BTreeSet<String> = BTreeSet::new();
        for combined in &combined {
            let allowed = combined.get(&key);
            let mut these: BTreeSet<String> = BTreeSet::new();
            if key == ZONE || key == CAPACITY_TYPE {
                for t in &pool.table.types {
                    for o in t.offerings.iter().filter(|o| o.available) {
                        if combined.allows(ZONE, &o.zone) && combined.allows(CAPACITY_TYPE, &o.capacity_type) {
                            these.insert(if key == ZONE { o.zone.clone() } else { o.capacity_type.clone() });
                        }
                    }
                }
            } else if pool.table.type_keys.contains(&key) && !pool.rules.defined_keys.contains(&key) {
                for t in &pool.table.types {
                    if let Some(v) = t.labels.get(&key) {
                        these.insert(v.clone());
                    }
                }
            } else if let Some(values) = allowed.and_then(|a| a.values()) {
                these.extend(values.iter().cloned());
            }
            vals.extend(these.into_iter().filter(|v| allowed.is_none_or(|a| a.has(v))));
        }
        for v in vals {
            out.entry(values.id(&v)).or_default().1 = true;
        }
    }
    (out, fresh)
}
