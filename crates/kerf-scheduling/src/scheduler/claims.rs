//! New NodeClaims: whether a pod joins an open claim or opens one, how a claim's topology
//! domains are chosen (narrowing its requirements and instance types), and the finished claim
//! with its compatible types cheapest first and its price.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use kerf_api::labels::{CAPACITY_TYPE, HOSTNAME, INSTANCE_TYPE, ZONE};

use super::SchedulingContext;
use super::ids::{Attempt, ClaimIx, Idx, NodeIx, PodIx, PoolIx};
use super::interning::Bits;
use super::packing::ClaimMix;
use super::pool_fit::Depth;
use super::resources::type_fits;
use crate::model::NewNodeClaim;
use crate::pod::HostPort;

pub(super) struct Claim {
    pub(super) pool: PoolIx,
    pub(super) req: u32,
    pub(super) types: Bits,
    pub(super) requests: Vec<i64>,
    pub(super) pods: Vec<PodIx>,
    pub(super) hostname: u32,
    pub(super) ports: Vec<HostPort>,
    pub(super) reserved: Vec<i64>,
    /// Componentwise largest allocatable over the candidate types (a quick reject).
    pub(super) max_alloc: Vec<i64>,
    pub(super) open: bool,
    /// Types the cost cap (see `packing`) kept the claim from growing into: they take no part
    /// in placing pods, but the finished claim still lists those its pods fit (dearer
    /// fallbacks for the launch) when the pool has no limits.
    pub(super) spare: Option<Bits>,
    /// The mix the claim was sized for (see `packing::Sizing`) and what it holds of it.
    pub(super) mix: ClaimMix,
}

/// A bin: an existing node (index) or a claim (index).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Bin {
    Node(NodeIx),
    Claim(ClaimIx),
}

/// What a new claim opens with.
struct Opening {
    pool: PoolIx,
    /// The pool's requirements (the claim's before its first pod), and with the opening pod's.
    pool_req: u32,
    req: u32,
    candidates: Bits,
    /// The types a cost cap removed from the candidates (see `Claim::spare`).
    spare: Option<Bits>,
    /// See `packing::Sizing::mix`.
    mix: Option<Arc<[u64]>>,
    /// The claim's hostname, interned.
    hostname: u32,
}

/// The outcome of trying a pod on a claim: the narrowed requirements and candidate types.
pub(super) struct ClaimPlan {
    pub(super) req: u32,
    pub(super) types: Bits,
}

impl SchedulingContext {
    /// The first of `domains` that, set as `key`'s value on the claim's requirements `req`, still
    /// leaves an instance type of `pool` (among `types`) that fits `total`: the narrowed
    /// requirements and the types that remain.
    pub(super) fn first_fitting_domain(
        &mut self,
        pool: PoolIx,
        req: u32,
        key: &str,
        types: &Bits,
        total: &[i64],
        domains: impl IntoIterator<Item = u32>,
    ) -> Option<(u32, Bits)> {
        for d in domains {
            let r = self.interned.narrow(req, key, d);
            let cr = self.pools.compat(pool, r, &self.interned);
            if self.pools[pool].table.any_fit(types, &cr, total) {
                return Some((r, types.and(&cr)));
            }
        }
        None
    }

    /// The domain of claim `c` (with requirements `req`) for `key`, when determined.
    pub(super) fn claim_domain(&self, c: ClaimIx, req: u32, key: &str) -> Option<u32> {
        if key == HOSTNAME {
            return Some(self.query.claims[c].hostname);
        }
        // Every finite value of an interned requirement is interned (see `intern_req`).
        let v = self.interned.reqs[req as usize].get(key).and_then(|r| r.single_value())?;
        self.interned.values.ids.get(v).copied()
    }

    /// Whether the attempt's pod fits claim `c`; `Err(true)` when the claim can never take
    /// this group.
    pub(super) fn claim_fits(&mut self, at: Attempt, c: ClaimIx) -> Result<ClaimPlan, bool> {
        let (pi, g) = (at.pod, at.group);
        let pool = self.query.claims[c].pool;
        let level_req = self.groups[g].state.levels[at.level].req;
        if self.pool_fit(at).admits(pool).is_err() {
            return Err(true);
        }
        if self.packing.over_mix(&self.query.claims[c].mix, pi) {
            return Err(false);
        }
        if !self.groups[g].ports.is_empty()
            && self.groups[g].ports.iter().any(|a| self.query.claims[c].ports.iter().any(|b| a.conflicts(b)))
        {
            return Err(true);
        }
        // Resources first: cheap, and most claims that fail, fail here.
        let mut total = std::mem::take(&mut self.query.scratch);
        total.clear();
        total.extend(self.query.claims[c].requests.iter().zip(&self.pods.requests[pi]).map(|(a, b)| a + b));
        let result = if !type_fits(&total, &self.query.claims[c].max_alloc) {
            Err(false)
        } else {
            let req = self.interned.intersect(self.query.claims[c].req, level_req);
            if self.interned.unsat[req as usize] {
                Err(true)
            } else {
                let types = std::mem::replace(&mut self.query.claims[c].types, Bits(Vec::new()));
                // Limits were reserved (the largest candidate's capacity) when the claim was
                // created; its candidates only shrink, so it cannot exceed them. Types where a
                // DaemonSet takes one of the pod's host ports are out.
                let plan = match self.pools[pool]
                    .table
                    .daemon_port_free_types(&self.groups[g].ports)
                    .map(|free| types.and(&free))
                {
                    Some(free) if free.is_empty() => Err(true),
                    Some(free) => self.plan_topology(at, c, req, &free, &total),
                    None => self.plan_topology(at, c, req, &types, &total),
                };
                self.query.claims[c].types = types;
                plan
            }
        };
        self.query.scratch = total;
        result
    }

    /// Resolves topology for a claim: checks determined domains and picks a domain for each
    /// undetermined key (narrowing the requirements), keeping some fitting type available.
    /// `Err(true)` when the claim can never take this group's pods.
    pub(super) fn plan_topology(
        &mut self,
        at: Attempt,
        c: ClaimIx,
        mut req: u32,
        types: &Bits,
        total: &[i64],
    ) -> Result<ClaimPlan, bool> {
        let pool = self.query.claims[c].pool;
        let compat = self.pools.compat(pool, req, &self.interned);
        if !self.pools[pool].table.any_fit(types, &compat, total) {
            return Err(false);
        }
        let mut types = types.and(&compat);
        let g = at.group;
        let level = Arc::clone(&self.groups[g].state.levels[at.level]);
        // Spread constraints.
        for s in &level.spreads {
            match self.claim_domain(c, req, &s.key) {
                Some(d) => {
                    if !self.topology.spread_allows(s, d, self.gone(), &self.interned.values) {
                        // With a fresh-domain minimum of 0, counts only grow: never again.
                        return Err(s.fresh);
                    }
                }
                None => {
                    // Candidates: allowed domains, fewest pods first.
                    let min = self.topology.spread_min(s, self.gone(), &self.interned.values);
                    let counter = s.counter;
                    let mut cands: Vec<(i64, u32)> = s
                        .domains
                        .iter()
                        .copied()
                        .filter(|d| self.interned.reqs[req as usize].allows(&s.key, self.interned.values.name(*d)))
                        .map(|d| (self.topology.counters[counter].get(d), d))
                        .filter(|(n, _)| n + s.self_match - min <= s.max_skew)
                        .collect();
                    cands.sort_by(|a, b| {
                        a.0.cmp(&b.0).then_with(|| self.interned.values.name(a.1).cmp(self.interned.values.name(b.1)))
                    });
                    let (r, t) = self
                        .first_fitting_domain(pool, req, &s.key, &types, total, cands.into_iter().map(|(_, d)| d))
                        .ok_or(false)?;
                    req = r;
                    types = t;
                }
            }
        }
        // Required (and still-preferred) pod affinity.
        for set in &level.affinity {
            let first_of_its_kind =
                set.matches_own && set.counters.iter().all(|ci| self.topology.counters[*ci].total == 0);
            for &ci in &set.counters {
                let key = self.topology.counters[ci].key.clone();
                match self.claim_domain(c, req, &key) {
                    Some(d) => {
                        if !first_of_its_kind && self.topology.counters[ci].get(d) == 0 {
                            return Err(false);
                        }
                    }
                    None => {
                        // Pin to a domain that has matching pods, or (first of its kind) to the
                        // cheapest domain so the rest of the group follows.
                        let cands: Vec<u32> = if first_of_its_kind {
                            self.candidate_values(pool, req, &key, &types)
                        } else {
                            let counts = &self.topology.counters[ci];
                            let mut v: Vec<u32> =
                                (0..counts.counts.len() as u32).filter(|d| counts.get(*d) > 0).collect();
                            v.retain(|d| self.interned.reqs[req as usize].allows(&key, self.interned.values.name(*d)));
                            v
                        };
                        let mut chosen = None;
                        for d in cands {
                            let r = self.interned.narrow(req, &key, d);
                            let t = types.and(&self.pools.compat(pool, r, &self.interned));
                            if !t.is_empty() {
                                chosen = Some((r, t));
                                break;
                            }
                        }
                        let (r, t) = chosen.ok_or(false)?;
                        req = r;
                        types = t;
                    }
                }
            }
        }
        // Anti-affinity: own terms and others' terms against this pod.
        let n_own = level.anti.len();
        let n_all = n_own + self.groups[g].state.rejected_by.len();
        for j in 0..n_all {
            let (counter, inverse) = if j < n_own {
                (Some(level.anti[j]), None)
            } else {
                (None, Some(self.groups[g].state.rejected_by[j - n_own]))
            };
            let key: &str = match (counter, inverse) {
                (Some(ci), _) => &self.topology.counters[ci].key,
                (_, Some(ii)) => &self.topology.inverses[ii].key,
                _ => continue,
            };
            let blocked = |s: &Self, d: u32| match (counter, inverse) {
                (Some(ci), _) => s.topology.counters[ci].get(d) > 0,
                (_, Some(ii)) => s.topology.inverses[ii].is_blocked(d),
                _ => false,
            };
            match self.claim_domain(c, req, key) {
                Some(d) => {
                    if blocked(self, d) {
                        // Blocked domains stay blocked.
                        return Err(true);
                    }
                }
                None => {
                    let key = key.to_string();
                    let cands = self.candidate_values(pool, req, &key, &types);
                    let open: Vec<u32> = cands.into_iter().filter(|d| !blocked(self, *d)).collect();
                    let (r, t) = self.first_fitting_domain(pool, req, &key, &types, total, open).ok_or(false)?;
                    req = r;
                    types = t;
                }
            }
        }
        if !self.pools[pool].rules.min_values.is_empty() {
            let fit = self.pools[pool].table.fitting(&types, total);
            if self.pools[pool].min_values_ok(&fit).is_some() {
                return Err(false);
            }
        }
        Ok(ClaimPlan { req, types })
    }

    /// Values of `key` a claim of `pool` with requirements `req` and candidate `types` could take,
    /// cheapest first for zone and capacity type, else sorted by value.
    pub(super) fn candidate_values(&mut self, pool: PoolIx, req: u32, key: &str, types: &Bits) -> Vec<u32> {
        let r = self.interned.reqs[req as usize].clone();
        let p = &self.pools[pool];
        let mut vals: Vec<(f64, String)>;
        if key == ZONE || key == CAPACITY_TYPE {
            let mut best: BTreeMap<String, f64> = BTreeMap::new();
            for i in types.iter() {
                for o in p.table.types[i].offerings.iter().filter(|o| o.available) {
                    if r.allows(ZONE, &o.zone) && r.allows(CAPACITY_TYPE, &o.capacity_type) {
                        let v = if key == ZONE { &o.zone } else { &o.capacity_type };
                        let e = best.entry(v.clone()).or_insert(f64::INFINITY);
                        *e = e.min(o.price);
                    }
                }
            }
            vals = best.into_iter().map(|(k, v)| (v, k)).collect();
        } else if let Some(values) = r.get(key).and_then(|x| x.values()) {
            vals = values.iter().map(|v| (0.0, v.clone())).collect();
        } else {
            let mut seen = BTreeSet::new();
            for i in types.iter() {
                if let Some(v) = p.table.types[i].labels.get(key)
                    && r.allows(key, v)
                {
                    seen.insert(v.clone());
                }
            }
            vals = seen.into_iter().map(|v| (0.0, v)).collect();
        }
        vals.sort_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.1.cmp(&b.1)));
        vals.into_iter().map(|(_, v)| self.interned.values.id(&v)).collect()
    }

    /// Puts the attempt's pod on claim `c`, as `plan` narrowed it.
    pub(super) fn commit_claim(&mut self, at: Attempt, c: ClaimIx, plan: ClaimPlan) {
        let (pi, g) = (at.pod, at.group);
        self.dearer.claim_changed(c);
        let pool = self.query.claims[c].pool;
        for (t, v) in self.query.claims[c].requests.iter_mut().zip(&self.pods.requests[pi]) {
            *t += v;
        }
        // Drop the cheapest candidates that no longer fit (requests only grow, so they never
        // will again); the rest are checked when needed, and in full when the claim is output.
        // A looser bound is fine for a quick reject: recompute only when topology or requirements
        // narrowed the candidates, not when pruning dropped the too-small ones.
        let narrowed = plan.types != self.query.claims[c].types;
        let mut types = plan.types;
        while let Some(i) = types.first() {
            if type_fits(&self.query.claims[c].requests, self.pools[pool].table.free.row(i)) {
                break;
            }
            types.clear(i);
        }
        if narrowed {
            let mut max = std::mem::take(&mut self.query.claims[c].max_alloc);
            self.pools[pool].table.max_alloc_into(&types, &mut max);
            self.query.claims[c].max_alloc = max;
        }
        self.query.claims[c].types = types;
        self.query.claims[c].req = plan.req;
        self.query.claims[c].pods.push(pi);
        self.packing.mix_placed(&mut self.query.claims[c].mix, pi);
        if !self.groups[g].ports.is_empty() {
            let ports = self.groups[g].ports.clone();
            self.query.claims[c].ports.extend(ports);
            // Nor may the types a cost cap set aside be ones a DaemonSet takes the ports on.
            if let Some(free) = self.pools[pool].table.daemon_port_free_types(&self.groups[g].ports)
                && let Some(spare) = self.query.claims[c].spare.as_ref()
            {
                self.query.claims[c].spare = Some(spare.and(&free));
            }
        }
        // Count the pod in every counter it matches, where the claim's domain is determined.
        let req = plan.req;
        for j in 0..self.groups[g].state.counted_by.len() {
            let ci = self.groups[g].state.counted_by[j];
            if let Some(d) = self.claim_domain(c, req, &self.topology.counters[ci].key) {
                self.topology.count(&mut self.query.journal, ci, d, 1);
            }
        }
        for j in 0..self.groups[g].state.own_inverse.len() {
            let ii = self.groups[g].state.own_inverse[j];
            if let Some(d) = self.claim_domain(c, req, &self.topology.inverses[ii].key) {
                self.topology.block(&mut self.query.journal, ii, d, 1);
            }
        }
        // Close the claim when even the smallest pod of the batch no longer fits any type.
        let mut probe = std::mem::take(&mut self.query.scratch);
        probe.clear();
        probe.extend(self.query.claims[c].requests.iter().zip(&self.query.min_request).map(|(a, b)| a + b));
        if !type_fits(&probe, &self.query.claims[c].max_alloc)
            || !self.pools[pool].table.any_fit(&self.query.claims[c].types, &self.query.claims[c].types, &probe)
        {
            self.query.claims[c].open = false;
        }
        self.query.scratch = probe;
        if self.query.claims[c].open {
            self.query.room.set(c.ix(), &self.query.claims[c].max_alloc, &self.query.claims[c].requests);
        } else {
            self.query.room.close(c.ix());
        }
    }

    /// Opens a claim of pool `p` for the attempt's pod, if the pool can take it.
    pub(super) fn new_claim(&mut self, at: Attempt, p: PoolIx) -> Option<ClaimIx> {
        let (pi, g) = (at.pod, at.group);
        let req = self.pool_fit(at).check(p, Depth::Admission).ok()?;
        let pool_req = self.pools[p].rules.req(&mut self.interned);
        // Claims hold their pods' requests; DaemonSet overhead is in each type's `free`.
        let total: Vec<i64> = self.pods.requests[pi].clone();
        // Only types whose capacity fits the remaining limits.
        let mut candidates = self.pools[p].types_within_limits();
        if let Some(free) = self.pools[p].table.daemon_port_free_types(&self.groups[g].ports) {
            candidates = candidates.and(&free);
        }
        if !self.pools[p].table.any_fit(&candidates, &candidates, &total) {
            return None;
        }
        // Sized by cost first (see `packing`); uncapped when the capped claim cannot take the pod.
        let sizing = self.packing.cost_sizing(&mut self.pools, &self.interned, p, req, &candidates);
        let hostname = self.interned.values.id(&format!("{}-claim-{}", self.pools[p].name, self.query.claims.len()));
        let mut mix = None;
        if let Some(sizing) = sizing {
            mix = sizing.mix;
            match sizing.cut {
                Some(cut) if self.pools[p].table.any_fit(&cut, &cut, &total) => {
                    let spare = Bits(candidates.0.iter().zip(&cut.0).map(|(a, b)| a & !b).collect());
                    let sized = Opening {
                        pool: p,
                        pool_req,
                        req,
                        candidates: cut,
                        spare: Some(spare),
                        mix: mix.clone(),
                        hostname,
                    };
                    if let Some(c) = self.open_claim(at, sized, &total) {
                        return Some(c);
                    }
                    // Uncapped, the claim is not the type its mix was chosen for.
                    mix = None;
                }
                Some(_) => mix = None,
                None => {}
            }
        }
        self.open_claim(
            at,
            Opening { pool: p, pool_req, req, candidates, spare: None, mix, hostname },
            total.as_slice(),
        )
    }

    /// Opens the claim `opening` describes for the attempt's pod (whose requests are `total`),
    /// if its topology and the pool's limits allow.
    fn open_claim(&mut self, at: Attempt, opening: Opening, total: &[i64]) -> Option<ClaimIx> {
        let Opening { pool: p, pool_req, req, candidates, spare, mix, hostname } = opening;
        let max_alloc = if self.pools[p].limits.limited || spare.is_some() {
            self.pools[p].table.max_alloc_of(&candidates)
        } else {
            self.pools[p].table.max_alloc.clone()
        };
        let c = self.query.claims.push(Claim {
            pool: p,
            req: pool_req,
            types: candidates.clone(),
            requests: vec![0; self.res.names.len()],
            pods: Vec::new(),
            hostname,
            ports: Vec::new(),
            reserved: vec![0; self.res.names.len()],
            max_alloc,
            open: true,
            spare,
            mix: self.packing.claim_mix(mix),
        });
        match self.plan_topology(at, c, req, &candidates, total) {
            Ok(plan)
                if !self.pools[p].limits_matter()
                    || self.pools[p].within_limits(&self.query.claims[c].reserved, &plan.types, total) =>
            {
                if let Some(reserve) = self.pools[p].reserve(&plan.types, total) {
                    self.query.claims[c].reserved = reserve;
                }
                self.query.room.push(&self.query.claims[c].max_alloc, &self.query.claims[c].requests);
                self.commit_claim(at, c, plan);
                Some(c)
            }
            _ => {
                self.query.claims.pop();
                None
            }
        }
    }

    /// Whether claim `c` may launch as type `i`, `types` its candidates and `compat` the types its
    /// requirements allow: a candidate, or a type a cost cap set aside as far as the requirements
    /// allow it (and, under NodePool limits, as far as the capacity the claim reserved): a
    /// complete claim launches its cheapest fitting type.
    pub(super) fn launchable(&self, c: ClaimIx, types: &Bits, compat: &Bits, i: usize) -> bool {
        let claim = &self.query.claims[c];
        types.contains(i)
            || claim.spare.as_ref().is_some_and(|s| s.contains(i))
                && compat.contains(i)
                && (!self.pools[claim.pool].limits.limited
                    || type_fits(self.pools[claim.pool].table.capacity.row(i), &claim.reserved))
    }

    /// Claim `c` as a NodeClaim to create (pod indexes are context indexes), and the price of
    /// its cheapest fitting instance type's cheapest compatible offering.
    pub(super) fn finish_claim(&mut self, c: ClaimIx) -> (NewNodeClaim, f64) {
        let (pool, req) = (self.query.claims[c].pool, self.query.claims[c].req);
        let order = self.pools.price_order(pool, req, &self.interned);
        let compat = self.pools.compat(pool, req, &self.interned);
        let claim = &self.query.claims[c];
        let pool = &self.pools[claim.pool];
        let r = &self.interned.reqs[claim.req as usize];
        let fitting: Vec<(f64, usize)> = order
            .iter()
            .copied()
            .filter(|(_, i)| {
                self.launchable(c, &claim.types, &compat, *i) && type_fits(&claim.requests, pool.table.free.row(*i))
            })
            .collect();
        let price = fitting.first().map(|(p, _)| *p).unwrap_or(f64::INFINITY);
        let types: Vec<usize> = fitting.into_iter().map(|(_, i)| i).collect();
        let requirements: Vec<kerf_api::NodeSelectorRequirementWithMinValues> = r
            .iter()
            .filter(|(k, x)| k.as_str() != INSTANCE_TYPE && !x.is_any())
            .flat_map(|(k, x)| x.to_node_selector(k))
            .collect();
        let mut labels = pool.rules.labels.clone();
        for (k, v) in r.single_valued_labels() {
            if k != INSTANCE_TYPE {
                labels.insert(k, v);
            }
        }
        let mut pods: Vec<usize> = claim.pods.iter().map(|p| p.ix()).collect();
        pods.sort_unstable();
        // The pods' requests plus the DaemonSet overhead of the cheapest fitting type.
        let mut requests = claim.requests.clone();
        if let Some(first) = types.first() {
            for (r, o) in requests.iter_mut().zip(pool.table.overhead.row(*first)) {
                *r += o;
            }
        }
        let claim = NewNodeClaim {
            node_pool: pool.name.clone(),
            requirements,
            instance_types: types.iter().map(|i| Arc::clone(&pool.table.types[*i])).collect(),
            instance_type_min_values: r.get(INSTANCE_TYPE).and_then(|x| x.min_values),
            labels,
            taints: pool.rules.taints.clone(),
            startup_taints: pool.rules.startup_taints.clone(),
            pods,
            requests: self.res.list(&requests),
        };
        (claim, price)
    }
}
