//! Terminate-first (Karpenter v1.15's `TerminateFirstDrift` and `TerminateFirstRepair` gates):
//! a node is normally replaced by launching its replacement first, but where the capacity its
//! replacement would take cannot grow, the replacement can only launch once the node is gone.
//! Two cases, one rule for drift and repair alike:
//!
//! - a static NodePool at its node limit: `limits.nodes` counts every claim of the pool
//!   (deleting ones included), so no replacement can be staged;
//! - a capacity reservation that is full, holding the node, whose pods fit nowhere else: the
//!   room its replacement needs is the node's own.
//!
//! With the gate, such a node is deleted first, without a replacement, and its room refilled
//! (by the static reconciler, or by provisioning launching its waiting pods into the freed
//! reservation). Without it the node waits, saying why ([`CannotGrow::describe`]).

use std::collections::BTreeMap;

use kerf_api::launch::{offering_allowed, type_meets};
use kerf_api::{NodePool, Requirement, Requirements, labels};

use super::candidates::Candidate;
use crate::input::TypesByPool;
use crate::static_pools::StaticCount;

/// Why a node's replacement cannot launch before the node is gone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum CannotGrow {
    /// Its static pool is at `limits.nodes`.
    StaticLimit { pool: String, limit: usize, claims: usize },
    /// The capacity reservation it runs in is full (the id).
    FullReservation(String),
}

impl CannotGrow {
    /// The condition, as the detail of a command or a blocked reason words it.
    pub(super) fn describe(&self) -> String {
        match self {
            CannotGrow::StaticLimit { pool, limit, claims } => {
                format!("static NodePool {pool} is at its node limit (limits.nodes {limit}, {claims} NodeClaims)")
            }
            CannotGrow::FullReservation(id) => format!("capacity reservation {id} is full"),
        }
    }

    /// A terminate-first command's detail after `why` (the node's reason), for a node with `n`
    /// pods.
    pub(super) fn terminate_first_detail(&self, why: &str, n: usize) -> String {
        let refill = match self {
            CannotGrow::StaticLimit { .. } => {
                "the pool refills it from its template once its instance is gone".to_string()
            }
            CannotGrow::FullReservation(_) => {
                format!("its {n} pod(s) wait for a replacement launched into the room it frees")
            }
        };
        format!("{why}; {}: the node is terminated first, and {refill}", self.describe())
    }
}

/// A static pool at its node limit, from its claim count.
pub(super) fn static_limit(pool: &str, count: &StaticCount) -> Option<CannotGrow> {
    (count.headroom() == 0).then(|| CannotGrow::StaticLimit {
        pool: pool.to_string(),
        limit: count.limit.unwrap_or(usize::MAX),
        claims: count.claims,
    })
}

/// The capacity reservation a reserved candidate runs in, when it is full and the candidate's
/// NodePool still allows the reservation's offering of the candidate's type and zone: the
/// replacement can only launch once the candidate's instance is gone. The caller has found
/// that the candidate's pods fit nowhere else.
pub(super) fn full_reservation(
    pools: &BTreeMap<String, NodePool>,
    types: &TypesByPool,
    c: &Candidate,
) -> Option<CannotGrow> {
    if c.capacity_type != labels::CAPACITY_TYPE_RESERVED {
        return None;
    }
    let pool = pools.get(&c.pool)?;
    let t = types.get(&c.pool)?.iter().find(|t| t.name == c.instance_type)?;
    let mut reqs = Requirements::from_node_selector(&pool.spec.template.spec.requirements);
    for (k, v) in &pool.spec.template.metadata.labels {
        reqs.add(k, Requirement::single(v.clone()));
    }
    let region = t.labels.get(labels::REGION).map_or("", String::as_str);
    if !type_meets(&reqs, t, region) {
        return None;
    }
    t.offerings
        .iter()
        .find(|o| o.zone == c.zone && !o.available && offering_allowed(&reqs, o))
        .and_then(|o| o.reservation.as_ref())
        .filter(|r| r.remaining == 0)
        .map(|r| CannotGrow::FullReservation(r.id.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_static_pool_cannot_grow_only_at_its_node_limit() {
        let count = |claims, limit| StaticCount { want: 3, live: 3, claims, limit };
        assert_eq!(static_limit("fixed", &count(3, Some(4))), None);
        assert_eq!(static_limit("fixed", &count(3, None)), None);
        let full = static_limit("fixed", &count(3, Some(3))).unwrap();
        assert_eq!(full.describe(), "static NodePool fixed is at its node limit (limits.nodes 3, 3 NodeClaims)");
        assert_eq!(
            full.terminate_first_detail("Drifted", 2),
            "Drifted; static NodePool fixed is at its node limit (limits.nodes 3, 3 NodeClaims): the node is \
             terminated first, and the pool refills it from its template once its instance is gone"
        );
        assert_eq!(
            CannotGrow::FullReservation("cr-1".into()).terminate_first_detail("why", 2),
            "why; capacity reservation cr-1 is full: the node is terminated first, and its 2 pod(s) wait for a \
             replacement launched into the room it frees"
        );
    }
}
