//! CapacityQuotas as the Scheduler keeps them (docs/design.md, "CapacityQuota"): what is left
//! of each quota's limits ([`Quota`]), shared by every NodePool, and per pool which of its
//! instance types each quota selects ([`PoolQuota`]), resolved once when the context is built.
//!
//! A type is selected when a node of it from the pool would carry labels the quota's selector
//! matches: the pool's labels and single-valued requirements, the type's labels, and the zone
//! and capacity type of one of its available offerings. A quota whose selector reads the zone
//! or the capacity type selects offerings, not whole types: it also keeps the requirement that
//! excludes every offering it selects (`avoid`, on the one of those keys that excludes fewer
//! of the pool's offerings). A claim whose requirements already exclude them takes nothing of
//! the quota; one the quota has no room for launches outside them, its requirements narrowed
//! by `avoid`, when its pods allow (see [`Bearing`]). A new claim may only be a type that fits
//! what is left of every other quota selecting it; when it opens, each quota that selects one
//! of its candidates is debited the largest capacity among those (and one node), so claims of
//! other pools in the same pass see the headroom that is left. A what-if that removes a node
//! gives what the node held back to the quotas that select it.

use std::collections::{BTreeMap, BTreeSet};

use kerf_api::labels::{CAPACITY_TYPE, INSTANCE_TYPE, NODE_POOL, ZONE};
use kerf_api::resources::NODES;
use kerf_api::shared::Operator;

use super::interning::{Bits, Interned};
use super::pools::{Pool, TypeTable};
use super::resources::{Resources, to_units, type_fits};
use crate::model::QuotaInput;
use crate::requirements::{Requirement, Requirements};

/// What is left of one quota's limits: per resource (`i64::MAX` when not limited) and nodes.
#[derive(Clone)]
pub(super) struct Quota {
    pub(super) remaining: Vec<i64>,
    pub(super) nodes_remaining: i64,
}

/// The quotas of a context and the input they were built from (for explanations).
#[derive(Default)]
pub(super) struct Quotas {
    pub(super) all: Vec<Quota>,
    pub(super) inputs: Vec<QuotaInput>,
}

/// One quota that selects some of a pool's types: its index and those types, and for a quota
/// that selects offerings, the requirements that exclude every one it selects.
#[derive(Clone)]
pub(super) struct PoolQuota {
    pub(super) quota: usize,
    pub(super) types: Bits,
    avoid: Option<Requirements>,
    /// `avoid`, interned when first needed.
    avoid_id: Option<u32>,
}

/// How a quota that selects some of a pool's types bears on a claim of given requirements.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Bearing {
    /// The requirements exclude every offering the quota selects: it takes nothing.
    Excluded,
    /// The requirements allow some offerings it selects, and these requirements (interned)
    /// would exclude them and still be satisfiable.
    Avoidable(u32),
    /// It counts every type it selects.
    Applies,
}

impl PoolQuota {
    /// How the quota bears on a claim of requirements `req` (interned in `interned`).
    pub(super) fn bearing(&mut self, req: u32, interned: &mut Interned) -> Bearing {
        let Some(avoid) = &self.avoid else { return Bearing::Applies };
        let id = *self.avoid_id.get_or_insert_with(|| interned.intern_req(avoid.clone()));
        let narrowed = interned.intersect(req, id);
        if narrowed == req {
            Bearing::Excluded
        } else if interned.unsat[narrowed as usize] {
            Bearing::Applies
        } else {
            Bearing::Avoidable(narrowed)
        }
    }
}

/// What a claim took of one quota: the types of its pool the quota selects, and the capacity
/// debited (zero when none of the claim's candidates was selected: a type set aside for the
/// launch that the quota selects is then out).
#[derive(Clone)]
pub(super) struct QuotaHold {
    pub(super) types: Bits,
    pub(super) reserved: Vec<i64>,
}

/// Why a quota keeps a pool's new claim out: the quota, the resource (`None`: the node count)
/// and what the smallest fitting type would need of it.
#[derive(Clone, Debug)]
pub(super) struct QuotaShort {
    pub(super) quota: usize,
    pub(super) resource: Option<usize>,
    pub(super) needs: i64,
}

impl Quotas {
    /// The quotas of `inputs` less what they hold already, in `res`'s resources.
    pub(super) fn build(inputs: &[QuotaInput], res: &Resources) -> Quotas {
        let all = inputs
            .iter()
            .map(|q| {
                let mut remaining = vec![i64::MAX; res.names.len()];
                let mut nodes_remaining = i64::MAX;
                for (k, limit) in q.limits.iter() {
                    let used = q.used.get(k);
                    if k == NODES {
                        nodes_remaining = limit.value_ceil() - used.value_ceil();
                    } else if let Some(i) = res.index.get(k) {
                        remaining[*i] = to_units(k, limit) - to_units(k, &used);
                    }
                }
                Quota { remaining, nodes_remaining }
            })
            .collect();
        Quotas { all, inputs: inputs.to_vec() }
    }

    /// Per quota, the types of pool `pool` (with `table`) it selects; quotas selecting none are
    /// left out.
    pub(super) fn select(&self, pool: &Pool, table: &TypeTable) -> Vec<PoolQuota> {
        let mut fixed: BTreeMap<String, String> = pool.rules.reqs.single_valued_labels();
        fixed.extend(pool.rules.labels.clone());
        fixed.insert(NODE_POOL.to_string(), pool.name.clone());
        let mut out = Vec::new();
        for (qi, q) in self.inputs.iter().enumerate() {
            let by_offering = q.selector.as_ref().is_some_and(|s| s.keys().any(|k| k == ZONE || k == CAPACITY_TYPE));
            let mut types = Bits::empty(table.types.len());
            // The zones and capacity types of the offerings it selects, and how many available
            // offerings have each (to pick the key whose exclusion costs fewer of them).
            let mut zones: BTreeSet<&str> = BTreeSet::new();
            let mut capacity_types: BTreeSet<&str> = BTreeSet::new();
            let mut offerings: Vec<(&str, &str)> = Vec::new();
            for (i, t) in table.types.iter().enumerate() {
                for o in t.offerings.iter().filter(|o| o.available) {
                    let selected = q.selects(|k| match k {
                        ZONE => Some(o.zone.as_str()),
                        CAPACITY_TYPE => Some(o.capacity_type.as_str()),
                        INSTANCE_TYPE => Some(t.name.as_str()),
                        _ => t.labels.get(k).or_else(|| fixed.get(k)).map(String::as_str),
                    });
                    if selected {
                        types.set(i);
                        if !by_offering {
                            break;
                        }
                        zones.insert(&o.zone);
                        capacity_types.insert(&o.capacity_type);
                    }
                    if by_offering {
                        offerings.push((&o.zone, &o.capacity_type));
                    }
                }
            }
            if types.is_empty() {
                continue;
            }
            let avoid = by_offering.then(|| {
                let lost_by_zone = offerings.iter().filter(|(z, _)| zones.contains(z)).count();
                let lost_by_type = offerings.iter().filter(|(_, c)| capacity_types.contains(c)).count();
                let (key, values) =
                    if lost_by_type <= lost_by_zone { (CAPACITY_TYPE, capacity_types) } else { (ZONE, zones) };
                let values: Vec<&str> = values.into_iter().collect();
                let mut r = Requirements::default();
                r.add(key, Requirement::new(Operator::NotIn, &values));
                r
            });
            out.push(PoolQuota { quota: qi, types, avoid, avoid_id: None });
        }
        out
    }

    /// Whether a node of `capacity` fits what is left of quota `q`.
    fn admit(&self, q: usize, capacity: &[i64]) -> bool {
        let quota = &self.all[q];
        quota.nodes_remaining > 0 && capacity.iter().zip(&quota.remaining).all(|(c, r)| *r == i64::MAX || c <= r)
    }

    /// `types` (of a pool whose quotas are `selected`, capacities in `table`) less those some
    /// quota selecting them has no room left for, for a claim of requirements `req`. With
    /// `narrow`, a quota that selects offerings the requirements can avoid narrows them instead
    /// (the quota takes nothing of a claim that avoids them). The requirements the claim opens
    /// with.
    pub(super) fn admit_types(
        &self,
        selected: &mut [PoolQuota],
        table: &TypeTable,
        types: &mut Bits,
        mut req: u32,
        narrow: bool,
        interned: &mut Interned,
    ) -> u32 {
        for pq in selected {
            let full = |i: &usize| types.contains(*i) && !self.admit(pq.quota, table.capacity.row(*i));
            if !pq.types.iter().any(|i| full(&i)) {
                continue;
            }
            match pq.bearing(req, interned) {
                Bearing::Excluded => {}
                Bearing::Avoidable(narrowed) if narrow => req = narrowed,
                Bearing::Avoidable(_) | Bearing::Applies => {
                    for i in pq.types.iter() {
                        if types.contains(i) && !self.admit(pq.quota, table.capacity.row(i)) {
                            types.clear(i);
                        }
                    }
                }
            }
        }
        req
    }

    /// A claim opens with candidates `types` holding `total` and requirements `req`: each quota
    /// selecting one of them (and an offering `req` allows) is debited the largest capacity
    /// among those that fit `total`, and a node. What was taken of each quota of the pool, for
    /// the claim.
    pub(super) fn reserve(
        &mut self,
        selected: &mut [PoolQuota],
        table: &TypeTable,
        types: &Bits,
        total: &[i64],
        req: u32,
        interned: &mut Interned,
    ) -> Vec<QuotaHold> {
        let mut holds = Vec::with_capacity(selected.len());
        for pq in selected {
            if pq.bearing(req, interned) == Bearing::Excluded {
                // Its requirements keep the claim out of every offering the quota selects.
                holds.push(QuotaHold { types: Bits::empty(table.types.len()), reserved: vec![0; total.len()] });
                continue;
            }
            let mine = pq.types.and(types);
            let mut reserved = vec![0i64; total.len()];
            let mut any = false;
            for i in mine.iter().filter(|i| type_fits(total, table.free.row(*i))) {
                any = true;
                for (r, c) in reserved.iter_mut().zip(table.capacity.row(i)) {
                    *r = (*r).max(*c);
                }
            }
            if any {
                let quota = &mut self.all[pq.quota];
                for (rem, v) in quota.remaining.iter_mut().zip(&reserved) {
                    if *rem != i64::MAX {
                        *rem -= v;
                    }
                }
                if quota.nodes_remaining != i64::MAX {
                    quota.nodes_remaining -= 1;
                }
            }
            holds.push(QuotaHold { types: pq.types.clone(), reserved });
        }
        holds
    }

    /// Gives what a removed node holds (`usage`) back to the quotas `of` it (a what-if's
    /// replacement may use it); the context puts the quotas back when the query ends.
    pub(super) fn release(&mut self, of: &[usize], usage: &[i64]) {
        for q in of {
            let quota = &mut self.all[*q];
            for (rem, v) in quota.remaining.iter_mut().zip(usage) {
                if *rem != i64::MAX {
                    *rem = rem.saturating_add(*v);
                }
            }
            if quota.nodes_remaining != i64::MAX {
                quota.nodes_remaining = quota.nodes_remaining.saturating_add(1);
            }
        }
    }

    /// The first quota (of `selected`) that keeps every type of `fitting` out of a claim of
    /// requirements `req`, with the resource and what the smallest such type needs of it;
    /// `None` when some type of `fitting` fits every quota that bears on it.
    pub(super) fn short(
        &self,
        selected: &mut [PoolQuota],
        table: &TypeTable,
        fitting: &Bits,
        req: u32,
        interned: &mut Interned,
    ) -> Option<QuotaShort> {
        let mut allowed = fitting.clone();
        self.admit_types(selected, table, &mut allowed, req, true, interned);
        if !allowed.is_empty() {
            return None;
        }
        for pq in selected.iter_mut() {
            let mine = pq.types.and(fitting);
            if mine.is_empty() || pq.bearing(req, interned) != Bearing::Applies {
                continue;
            }
            let quota = &self.all[pq.quota];
            if quota.nodes_remaining <= 0 {
                return Some(QuotaShort { quota: pq.quota, resource: None, needs: 1 });
            }
            for (ri, rem) in quota.remaining.iter().enumerate().filter(|(_, r)| **r != i64::MAX) {
                let needs = mine.iter().map(|i| table.capacity.get(i, ri)).min().unwrap_or(0);
                if needs > *rem {
                    return Some(QuotaShort { quota: pq.quota, resource: Some(ri), needs });
                }
            }
        }
        selected.iter().find(|pq| !pq.types.and(fitting).is_empty()).map(|pq| QuotaShort {
            quota: pq.quota,
            resource: None,
            needs: 0,
        })
    }
}

impl QuotaHold {
    /// Whether type `i` (capacity `capacity`) stays within what the claim took of this quota.
    pub(super) fn admits(&self, i: usize, capacity: &[i64]) -> bool {
        !self.types.contains(i) || type_fits(capacity, &self.reserved)
    }
}
