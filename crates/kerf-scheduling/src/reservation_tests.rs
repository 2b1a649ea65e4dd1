//! Capacity reservations in provisioning: new claims are bound to reservations with room, one
//! claim per instance of room, so that each stays the reserved type; requirements on the
//! reservation labels pick the offerings that carry them.

use std::sync::Arc;

use kerf_api::labels::{CAPACITY_RESERVATION_TYPE, CAPACITY_TYPE};
use kerf_api::{Offering, OfferingReservation, ResourceList};

use crate::instance::InstanceType;
use crate::model::{NewNodeClaim, NodePoolInput, SchedulingInput};
use crate::scheduler::schedule;
use crate::testing::*;

/// `small` (2 CPU) and `big` (16 CPU) in zone a; `small` also reserved (2 instances of room,
/// $0/h, a capacity block).
fn types(room: u32) -> Vec<Arc<InstanceType>> {
    let mut small = instance_type("small", "2", "8Gi", "30", 0.10, &["a"]);
    small.offerings.push(Offering {
        zone: "a".into(),
        capacity_type: "reserved".into(),
        price: 0.0,
        available: room > 0,
        reservation: Some(Arc::new(OfferingReservation {
            id: "cr-1".into(),
            reservation_type: "capacity-block".into(),
            remaining: room,
            interruptible: false,
        })),
    });
    vec![Arc::new(small), Arc::new(instance_type("big", "16", "64Gi", "200", 0.70, &["a"]))]
}

fn input(room: u32, pods: usize, selector: Option<(&str, &str)>) -> SchedulingInput {
    let pool = NodePoolInput {
        node_pool: Arc::new(node_pool("default", vec![])),
        instance_types: types(room),
        in_use: ResourceList::new(),
    };
    let pods = (0..pods)
        .map(|i| {
            let p = pod(&format!("p{i}")).cpu("900m");
            match selector {
                Some((k, v)) => p.node_selector(k, v).build(),
                None => p.build(),
            }
        })
        .collect();
    SchedulingInput { node_pools: vec![pool], pods, ..Default::default() }
}

fn names(c: &NewNodeClaim) -> Vec<&str> {
    c.instance_types.iter().map(|t| t.name.as_str()).collect()
}

#[test]
fn each_unit_of_room_gets_a_claim_of_the_reserved_type_and_the_rest_is_packed_as_usual() {
    // Twelve 900m pods: two per `small`. Without a reservation they share `big` nodes.
    let r = schedule(&input(0, 12, None));
    assert!(r.new_node_claims.iter().all(|c| names(c)[0] == "big"), "{:?}", r.new_node_claims);
    // With room for two: two claims that can only be `small` (each holding two pods, the rest
    // of its candidates kept as fallbacks after it), and the other pods on a `big`.
    let r = schedule(&input(2, 12, None));
    let reserved: Vec<&NewNodeClaim> = r.new_node_claims.iter().filter(|c| names(c)[0] == "small").collect();
    assert_eq!(reserved.len(), 2, "{:?}", r.new_node_claims);
    assert!(reserved.iter().all(|c| c.pods.len() == 2));
    let rest: usize = r.new_node_claims.iter().filter(|c| names(c)[0] != "small").map(|c| c.pods.len()).sum();
    assert_eq!(rest, 8);
}

#[test]
fn a_pod_that_requires_a_capacity_block_is_placed_only_where_one_is_offered() {
    let r = schedule(&input(2, 2, Some((CAPACITY_RESERVATION_TYPE, "capacity-block"))));
    assert_eq!(r.new_node_claims.len(), 1);
    assert_eq!(names(&r.new_node_claims[0]), ["small"], "big has no reserved offering");
    // A full block: nothing offers it.
    let r = schedule(&input(0, 2, Some((CAPACITY_RESERVATION_TYPE, "capacity-block"))));
    assert!(r.new_node_claims.is_empty());
    // A pod that must run on-demand is never bound to the reservation.
    let r = schedule(&input(2, 4, Some((CAPACITY_TYPE, "on-demand"))));
    assert!(r.new_node_claims.iter().all(|c| names(c)[0] == "big"), "{:?}", r.new_node_claims);
}
