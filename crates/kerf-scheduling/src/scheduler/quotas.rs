//! CapacityQuotas as the Scheduler keeps them (docs/design.md, "CapacityQuota"): what is left
//! of each quota's limits ([`Quota`]), shared by every NodePool, and per pool which of its
//! instance types each quota selects ([`PoolQuota`]), resolved once when the context is built.
//!
//! A type is selected when a node of it from the pool would carry labels the quota's selector
//! matches: the pool's labels and single-valued requirements, the type's labels, and the zone
//! and capacity type of one of its available offerings (any one will do: a selector on zone or
//! capacity type counts a type as selected when some offering of it is). A new claim may only
//! be a type that fits what is left of every quota selecting it; when it opens, each quota that
//! selects one of its candidates is debited the largest capacity among those (and one node),
//! so claims of other pools in the same pass see the headroom that is left. A what-if that
//! removes a node gives what the node held back to the quotas that select it.

use std::collections::BTreeMap;

use kerf_api::labels::{CAPACITY_TYPE, INSTANCE_TYPE, NODE_POOL, ZONE};
use kerf_api::resources::NODES;

use super::interning::Bits;
use super::pools::{Pool, TypeTable};
use super::resources::{Resources, to_units, type_fits};
use crate::model::QuotaInput;

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

/// One quota that selects some of a pool's types: its index and those types.
#[derive(Clone)]
pub(super) struct PoolQuota {
    pub(super) quota: usize,
    pub(super) types: Bits,
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
            let mut types = Bits::empty(table.types.len());
            for (i, t) in table.types.iter().enumerate() {
                let selected = t.offerings.iter().filter(|o| o.available).any(|o| {
                    q.selects(|k| match k {
                        ZONE => Some(o.zone.as_str()),
                        CAPACITY_TYPE => Some(o.capacity_type.as_str()),
                        INSTANCE_TYPE => Some(t.name.as_str()),
                        _ => t.labels.get(k).or_else(|| fixed.get(k)).map(String::as_str),
                    })
                });
                if selected {
                    types.set(i);
                }
            }
            if !types.is_empty() {
                out.push(PoolQuota { quota: qi, types });
            }
        }
        out
    }

    /// Whether a node of `capacity` fits what is left of quota `q`.
    fn admit(&self, q: usize, capacity: &[i64]) -> bool {
        let quota = &self.all[q];
        quota.nodes_remaining > 0 && capacity.iter().zip(&quota.remaining).all(|(c, r)| *r == i64::MAX || c <= r)
    }

    /// `types` (of a pool whose quotas are `selected`, capacities in `table`) less those some
    /// quota selecting them has no room left for.
    pub(super) fn admit_types(&self, selected: &[PoolQuota], table: &TypeTable, types: &mut Bits) {
        for pq in selected {
            for i in pq.types.and(types).iter() {
                if !self.admit(pq.quota, table.capacity.row(i)) {
                    types.clear(i);
                }
            }
        }
    }

    /// A claim opens with candidates `types` holding `total`: each quota selecting one of them
    /// is debited the largest capacity among those that fit `total`, and a node. What was taken
    /// of each quota of the pool, for the claim.
    pub(super) fn reserve(
        &mut self,
        selected: &[PoolQuota],
        table: &TypeTable,
        types: &Bits,
        total: &[i64],
    ) -> Vec<QuotaHold> {
        let mut holds = Vec::with_capacity(selected.len());
        for pq in selected {
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

    /// The first quota (of `selected`) that keeps every type of `fitting` out, with the resource
    /// and what the smallest such type needs of it; `None` when some type of `fitting` fits
    /// every quota that selects it.
    pub(super) fn short(&self, selected: &[PoolQuota], table: &TypeTable, fitting: &Bits) -> Option<QuotaShort> {
        let mut allowed = fitting.clone();
        self.admit_types(selected, table, &mut allowed);
        if !allowed.is_empty() {
            return None;
        }
        for pq in selected {
            let mine = pq.types.and(fitting);
            if mine.is_empty() {
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
