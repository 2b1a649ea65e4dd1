//! New NodeClaims: the running query's claims ([`Claims`]) and what placing a pod on them does,
//! on the parts it reads and changes ([`ClaimParts`]): whether the pod joins an open claim or
//! opens one, how a claim's topology domains are chosen (narrowing its requirements and
//! instance types), and the finished claim ([`Claim::finish`]) with its compatible types
//! cheapest first and its price.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use kerf_api::labels::{CAPACITY_TYPE, HOSTNAME, INSTANCE_TYPE, ZONE};

use super::dearer::Verdicts;
use super::ids::{Attempt, ClaimIx, Idx, IxVec, NodeIx, PodIx, PoolIx};
use super::interning::{Bits, Interned};
use super::journal::Undo;
use super::packing::{ClaimMix, Packing};
use super::pool_fit::{Depth, PoolFit};
use super::pools::{Pool, Pools};
use super::preferences::Group;
use super::quotas::QuotaHold;
use super::resources::{Resources, type_fits};
use super::room::RoomIndex;
use super::topology::{Gone, Topology};
use crate::model::NewNodeClaim;
use crate::pod::HostPort;

/// The running query's new claims, and what finds those with room for a pod.
#[derive(Default)]
pub(super) struct Claims {
    /// In creation order.
    pub(super) all: IxVec<ClaimIx, Claim>,
    /// Which of them could take a pod of given requests (see `room`).
    pub(super) room: RoomIndex,
    /// A reusable buffer for a claim's requests plus a pod's.
    pub(super) scratch: Vec<i64>,
    /// Componentwise minimum request over the pods being placed (a claim that cannot fit it is
    /// closed).
    pub(super) min_request: Vec<i64>,
}

impl Claims {
    /// Drops every claim (`dims`: the number of resources).
    pub(super) fn clear(&mut self, dims: usize) {
        self.all.clear();
        self.room.clear(dims);
    }
}

/// A new claim of a NodePool, as placement builds it.
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
    /// The capacity reservation the claim holds a unit of (see [`ClaimParts::reserved_binding`]).
    pub(super) reservation: Option<Arc<str>>,
    /// What it took of each CapacityQuota that selects some of its pool's types.
    pub(super) quota_holds: Vec<QuotaHold>,
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
    /// See `Claim::reservation`.
    reservation: Option<Arc<str>>,
}

/// What placing an attempt's pod on new claims reads and changes, borrowed from the context:
/// the claims, the pools and interned sets whose caches it fills, the topology counts and the
/// journal that records them, the verdicts and sizing of `dearer` and `packing`, and the pod's
/// group (its level read, its pool verdicts kept).
pub(super) struct ClaimParts<'s> {
    pub(super) at: Attempt,
    pub(super) group: &'s mut Group,
    /// The pod's dense requests.
    pub(super) requests: &'s [i64],
    pub(super) claims: &'s mut Claims,
    pub(super) pools: &'s mut Pools,
    pub(super) interned: &'s mut Interned,
    pub(super) topology: &'s mut Topology,
    pub(super) journal: &'s mut Vec<Undo>,
    pub(super) dearer: &'s mut Verdicts,
    pub(super) packing: &'s mut Packing,
    pub(super) gone: Gone<'s>,
}

/// The outcome of trying a pod on a claim: the narrowed requirements and candidate types.
pub(super) struct ClaimPlan {
    pub(super) req: u32,
    pub(super) types: Bits,
}

impl ClaimParts<'_> {
    /// The first of `domains` that, set as `key`'s value on the claim's requirements `req`, still
    /// leaves an instance type of `pool` (among `types`) that fits `total`: the narrowed
    /// requirements and the types that remain.
    fn first_fitting_domain(
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
            let cr = self.pools.compat(pool, r, self.interned);
            if self.pools[pool].table.any_fit(types, &cr, total) {
                return Some((r, types.and(&cr)));
            }
        }
        None
    }

    /// The domain of claim `c` (with requirements `req`) for `key`, when determined.
    fn claim_domain(&self, c: ClaimIx, req: u32, key: &str) -> Option<u32> {
        if key == HOSTNAME {
            return Some(self.claims.all[c].hostname);
        }
        // Every finite value of an interned requirement is interned (see `intern_req`).
        let v = self.interned.reqs[req as usize].get(key).and_then(|r| r.single_value())?;
        self.interned.values.ids.get(v).copied()
    }

    /// Whether the pod fits claim `c`; `Err(true)` when the claim can never take this group.
    pub(super) fn fits(&mut self, c: ClaimIx) -> Result<ClaimPlan, bool> {
        let pi = self.at.pod;
        let pool = self.claims.all[c].pool;
        let level_req = self.group.state.levels[self.at.level].req;
        if self.pool_fit().admits(pool).is_err() {
            return Err(true);
        }
        if self.packing.over_mix(&self.claims.all[c].mix, pi) {
            return Err(false);
        }
        if !self.group.ports.is_empty()
            && self.group.ports.iter().any(|a| self.claims.all[c].ports.iter().any(|b| a.conflicts(b)))
        {
            return Err(true);
        }
        // Resources first: cheap, and most claims that fail, fail here.
        let mut total = std::mem::take(&mut self.claims.scratch);
        total.clear();
        total.extend(self.claims.all[c].requests.iter().zip(self.requests).map(|(a, b)| a + b));
        let result = if !type_fits(&total, &self.claims.all[c].max_alloc) {
            Err(false)
        } else {
            let req = self.interned.intersect(self.claims.all[c].req, level_req);
            if self.interned.unsat[req as usize] {
                Err(true)
            } else {
                let types = std::mem::replace(&mut self.claims.all[c].types, Bits(Vec::new()));
                // Limits were reserved (the largest candidate's capacity) when the claim was
                // created; its candidates only shrink, so it cannot exceed them. Types where a
                // DaemonSet takes one of the pod's host ports are out.
                let plan =
                    match self.pools[pool].table.daemon_port_free_types(&self.group.ports).map(|free| types.and(&free))
                    {
                        Some(free) if free.is_empty() => Err(true),
                        Some(free) => self.plan_topology(c, req, &free, &total),
                        None => self.plan_topology(c, req, &types, &total),
                    };
                self.claims.all[c].types = types;
                plan
            }
        };
        self.claims.scratch = total;
        result
    }

    /// Resolves topology for a claim: checks determined domains and picks a domain for each
    /// undetermined key (narrowing the requirements), keeping some fitting type available.
    /// `Err(true)` when the claim can never take this group's pods.
    fn plan_topology(&mut self, c: ClaimIx, mut req: u32, types: &Bits, total: &[i64]) -> Result<ClaimPlan, bool> {
        let pool = self.claims.all[c].pool;
        let compat = self.pools.compat(pool, req, self.interned);
        if !self.pools[pool].table.any_fit(types, &compat, total) {
            return Err(false);
        }
        let mut types = types.and(&compat);
        let level = Arc::clone(&self.group.state.levels[self.at.level]);
        // Spread constraints.
        for s in &level.spreads {
            match self.claim_domain(c, req, &s.key) {
                Some(d) => {
                    if !self.topology.spread_allows(s, d, self.gone, &self.interned.values) {
                        // With a fresh-domain minimum of 0, counts only grow: never again.
                        return Err(s.fresh);
                    }
                }
                None => {
                    // Candidates: allowed domains, fewest pods first.
                    let min = self.topology.spread_min(s, self.gone, &self.interned.values);
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
                            let t = types.and(&self.pools.compat(pool, r, self.interned));
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
        let n_all = n_own + self.group.state.rejected_by.len();
        for j in 0..n_all {
            let (counter, inverse) = if j < n_own {
                (Some(level.anti[j]), None)
            } else {
                (None, Some(self.group.state.rejected_by[j - n_own]))
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
    fn candidate_values(&mut self, pool: PoolIx, req: u32, key: &str, types: &Bits) -> Vec<u32> {
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

    /// Puts the pod on claim `c`, as `plan` narrowed it.
    pub(super) fn commit(&mut self, c: ClaimIx, plan: ClaimPlan) {
        let pi = self.at.pod;
        self.dearer.claim_changed(c);
        let pool = self.claims.all[c].pool;
        for (t, v) in self.claims.all[c].requests.iter_mut().zip(self.requests) {
            *t += v;
        }
        // Drop the cheapest candidates that no longer fit (requests only grow, so they never
        // will again); the rest are checked when needed, and in full when the claim is output.
        // A looser bound is fine for a quick reject: recompute only when topology or requirements
        // narrowed the candidates, not when pruning dropped the too-small ones.
        let narrowed = plan.types != self.claims.all[c].types;
        let mut types = plan.types;
        while let Some(i) = types.first() {
            if type_fits(&self.claims.all[c].requests, self.pools[pool].table.free.row(i)) {
                break;
            }
            types.clear(i);
        }
        if narrowed {
            let mut max = std::mem::take(&mut self.claims.all[c].max_alloc);
            self.pools[pool].table.max_alloc_into(&types, &mut max);
            self.claims.all[c].max_alloc = max;
        }
        self.claims.all[c].types = types;
        self.claims.all[c].req = plan.req;
        self.claims.all[c].pods.push(pi);
        self.packing.mix_placed(&mut self.claims.all[c].mix, pi);
        if !self.group.ports.is_empty() {
            let ports = self.group.ports.clone();
            self.claims.all[c].ports.extend(ports);
            // Nor may the types a cost cap set aside be ones a DaemonSet takes the ports on.
            if let Some(free) = self.pools[pool].table.daemon_port_free_types(&self.group.ports)
                && let Some(spare) = self.claims.all[c].spare.as_ref()
            {
                self.claims.all[c].spare = Some(spare.and(&free));
            }
        }
        // Count the pod in every counter it matches, where the claim's domain is determined.
        let req = plan.req;
        for j in 0..self.group.state.counted_by.len() {
            let ci = self.group.state.counted_by[j];
            if let Some(d) = self.claim_domain(c, req, &self.topology.counters[ci].key) {
                self.topology.count(self.journal, ci, d, 1);
            }
        }
        for j in 0..self.group.state.own_inverse.len() {
            let ii = self.group.state.own_inverse[j];
            if let Some(d) = self.claim_domain(c, req, &self.topology.inverses[ii].key) {
                self.topology.block(self.journal, ii, d, 1);
            }
        }
        // Close the claim when even the smallest pod of the batch no longer fits any type.
        let mut probe = std::mem::take(&mut self.claims.scratch);
        probe.clear();
        probe.extend(self.claims.all[c].requests.iter().zip(&self.claims.min_request).map(|(a, b)| a + b));
        if !type_fits(&probe, &self.claims.all[c].max_alloc)
            || !self.pools[pool].table.any_fit(&self.claims.all[c].types, &self.claims.all[c].types, &probe)
        {
            self.claims.all[c].open = false;
        }
        self.claims.scratch = probe;
        if self.claims.all[c].open {
            let claim = &self.claims.all[c];
            self.claims.room.set(c.ix(), &claim.max_alloc, &claim.requests);
        } else {
            self.claims.room.close(c.ix());
        }
    }

    /// Opens a claim of pool `p` for the pod, if the pool can take it.
    pub(super) fn open(&mut self, p: PoolIx) -> Option<ClaimIx> {
        let req = self.pool_fit().check(p, Depth::Admission).ok()?;
        let pool_req = self.pools[p].rules.req(self.interned);
        // Claims hold their pods' requests; DaemonSet overhead is in each type's `free`.
        let total = self.requests;
        // Only types whose capacity fits the remaining limits (the requirements narrowed to
        // keep out of a full quota's offerings when that is what lets the pod fit).
        let (mut candidates, req) = self.pools.types_within_limits(p, req, total, self.interned);
        if self.interned.unsat[req as usize] {
            return None;
        }
        if let Some(free) = self.pools[p].table.daemon_port_free_types(&self.group.ports) {
            candidates = candidates.and(&free);
        }
        if !self.pools[p].table.any_fit(&candidates, &candidates, total) {
            return None;
        }
        let hostname = self.interned.values.id(&format!("{}-claim-{}", self.pools[p].name, self.claims.all.len()));
        if let Some((id, bound)) = self.reserved_binding(p, req, &candidates, total) {
            // The other candidates stay as fallbacks of the launch (a reservation that is full
            // by then falls through to the next capacity type).
            let spare = Bits(candidates.0.iter().zip(&bound.0).map(|(a, b)| a & !b).collect());
            let opening = Opening {
                pool: p,
                pool_req,
                req,
                candidates: bound,
                spare: Some(spare),
                mix: None,
                hostname,
                reservation: Some(id),
            };
            if let Some(c) = self.open_with(opening, total) {
                return Some(c);
            }
        }
        // Sized by cost first (see `packing`); uncapped when the capped claim cannot take the pod.
        let sizing = self.packing.cost_sizing(self.pools, self.interned, p, req, &candidates);
        let mut mix = None;
        if let Some(sizing) = sizing {
            mix = sizing.mix;
            match sizing.cut {
                Some(cut) if self.pools[p].table.any_fit(&cut, &cut, total) => {
                    let spare = Bits(candidates.0.iter().zip(&cut.0).map(|(a, b)| a & !b).collect());
                    let sized = Opening {
                        pool: p,
                        pool_req,
                        req,
                        candidates: cut,
                        spare: Some(spare),
                        mix: mix.clone(),
                        hostname,
                        reservation: None,
                    };
                    if let Some(c) = self.open_with(sized, total) {
                        return Some(c);
                    }
                    // Uncapped, the claim is not the type its mix was chosen for.
                    mix = None;
                }
                Some(_) => mix = None,
                None => {}
            }
        }
        self.open_with(
            Opening { pool: p, pool_req, req, candidates, spare: None, mix, hostname, reservation: None },
            total,
        )
    }

    /// Reserved capacity first, as Karpenter fills reservations: while a capacity reservation
    /// that a claim of pool `p` for the pod (requirements `req`, candidate types `candidates`)
    /// may launch into has room that no claim of this query holds, the new claim holds a unit
    /// of it and may only become a type with an offering of it (so it does not outgrow the
    /// reserved type); the cheapest such reservation, then by id. The reservation and the
    /// types, or `None` when there is none with room or the pod fits none of its types.
    fn reserved_binding(&self, p: PoolIx, req: u32, candidates: &Bits, total: &[i64]) -> Option<(Arc<str>, Bits)> {
        let table = &self.pools[p].table;
        if !table.has_reserved {
            return None;
        }
        let r = &self.interned.reqs[req as usize];
        // Reservation id -> (price, room), over the candidates' allowed reserved offerings.
        let mut room: BTreeMap<&str, (f64, u32)> = BTreeMap::new();
        for i in candidates.iter() {
            for o in &table.types[i].offerings {
                if let Some(res) = &o.reservation
                    && o.available
                    && kerf_api::launch::offering_allowed(r, o)
                    && type_fits(total, table.free.row(i))
                {
                    room.insert(&res.id, (o.price, res.remaining));
                }
            }
        }
        let held = |id: &str| self.claims.all.iter().filter(|c| c.reservation.as_deref() == Some(id)).count() as u32;
        let (id, _) = room
            .iter()
            .filter(|(id, (_, left))| held(id) < *left)
            .min_by(|a, b| a.1.0.total_cmp(&b.1.0).then_with(|| a.0.cmp(b.0)))?;
        let mut bound = Bits::empty(table.types.len());
        for i in candidates.iter() {
            let offers = table.types[i].offerings.iter().any(|o| {
                o.reservation.as_ref().is_some_and(|res| *res.id == **id)
                    && o.available
                    && kerf_api::launch::offering_allowed(r, o)
            });
            if offers {
                bound.set(i);
            }
        }
        Some((Arc::from(*id), bound))
    }

    /// Opens the claim `opening` describes for the pod (whose requests are `total`), if its
    /// topology and the pool's limits allow.
    fn open_with(&mut self, opening: Opening, total: &[i64]) -> Option<ClaimIx> {
        let Opening { pool: p, pool_req, req, candidates, spare, mix, hostname, reservation } = opening;
        let max_alloc = if self.pools[p].limits.limited || spare.is_some() || !self.pools[p].quotas.is_empty() {
            self.pools[p].table.max_alloc_of(&candidates)
        } else {
            self.pools[p].table.max_alloc.clone()
        };
        let c = self.claims.all.push(Claim {
            pool: p,
            req: pool_req,
            types: candidates.clone(),
            requests: vec![0; total.len()],
            pods: Vec::new(),
            hostname,
            ports: Vec::new(),
            reserved: vec![0; total.len()],
            max_alloc,
            open: true,
            spare,
            mix: self.packing.claim_mix(mix),
            reservation,
            quota_holds: Vec::new(),
        });
        match self.plan_topology(c, req, &candidates, total) {
            Ok(plan)
                if !self.pools[p].limits_matter()
                    || self.pools[p].within_limits(&self.claims.all[c].reserved, &plan.types, total) =>
            {
                let (reserve, holds) = self.pools.reserve(p, &plan.types, total, plan.req, self.interned);
                if let Some(reserve) = reserve {
                    self.claims.all[c].reserved = reserve;
                }
                self.claims.all[c].quota_holds = holds;
                let claim = &self.claims.all[c];
                self.claims.room.push(&claim.max_alloc, &claim.requests);
                self.commit(c, plan);
                Some(c)
            }
            _ => {
                self.claims.all.pop();
                None
            }
        }
    }

    /// The pool-fit check for the pod (see [`PoolFit`]).
    fn pool_fit(&mut self) -> PoolFit<'_> {
        PoolFit {
            group: self.group,
            level: self.at.level,
            requests: self.requests,
            pools: self.pools,
            interned: self.interned,
            topology: self.topology,
            gone: self.gone,
        }
    }
}

impl Claim {
    /// Whether the claim may launch as type `i` of its pool `pool`, `types` its candidates and
    /// `compat` the types its requirements allow: a candidate, or a type a cost cap set aside
    /// as far as the requirements allow it (and, under NodePool limits, as far as the capacity
    /// the claim reserved, and of each CapacityQuota that selects the type): a complete claim
    /// launches its cheapest fitting type.
    pub(super) fn launchable(&self, pool: &Pool, types: &Bits, compat: &Bits, i: usize) -> bool {
        types.contains(i)
            || self.spare.as_ref().is_some_and(|s| s.contains(i))
                && compat.contains(i)
                && (!pool.limits.limited || type_fits(pool.table.capacity.row(i), &self.reserved))
                && self.quota_holds.iter().all(|h| h.admits(i, pool.table.capacity.row(i)))
    }

    /// The claim as a NodeClaim to create (pod indexes are context indexes; `res` names the
    /// resources), and the price of its cheapest fitting instance type's cheapest compatible
    /// offering.
    pub(super) fn finish(&self, pools: &mut Pools, interned: &Interned, res: &Resources) -> (NewNodeClaim, f64) {
        let order = pools.price_order(self.pool, self.req, interned);
        let compat = pools.compat(self.pool, self.req, interned);
        let pool = &pools[self.pool];
        let r = &interned.reqs[self.req as usize];
        let fitting: Vec<(f64, usize)> = order
            .iter()
            .copied()
            .filter(|(_, i)| {
                self.launchable(pool, &self.types, &compat, *i) && type_fits(&self.requests, pool.table.free.row(*i))
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
        let mut pods: Vec<usize> = self.pods.iter().map(|p| p.ix()).collect();
        pods.sort_unstable();
        // The pods' requests plus the DaemonSet overhead of the cheapest fitting type.
        let mut requests = self.requests.clone();
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
            requests: res.list(&requests),
        };
        (claim, price)
    }
}
