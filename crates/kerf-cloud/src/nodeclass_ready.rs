//! An EC2NodeClass's `Ready` condition over its dependents, and its `CapacityReservationsReady`
//! condition, as Karpenter sets them; one rule for every provider that resolves node classes
//! (the simulated account, kwok through it, and EC2). See docs/design.md, "Capacity
//! reservations".
//!
//! `Ready` is True when each dependent is: `AMIsReady`, `InstanceProfileReady`,
//! `SecurityGroupsReady`, `SubnetsReady`, `ValidationSucceeded`, and with Karpenter's
//! `ReservedCapacity` gate `CapacityReservationsReady`. Otherwise it takes the first False
//! dependent's status, reason and message (else the first one not True).
//!
//! `CapacityReservationsReady` is True once the class's reservations are read (also when it
//! selects none). A read that fails leaves a True condition as it is (the reservations read
//! before are kept, as Karpenter's reconciler returns its error without touching the
//! condition); a class whose reservations were never read has it Unknown, reason
//! `CapacityReservationsResolutionFailed` and the error as message, so it is not Ready.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kerf_api::Condition;
use kerf_api::ec2nodeclass::{CONDITION_CAPACITY_RESERVATIONS_READY, CONDITION_READY, READY_DEPENDS_ON};
use kerf_api::shared::{find_condition, root_condition, set_condition};

use crate::clock::Timestamp;

/// The reason of a `CapacityReservationsReady` that could not be read.
pub const RESERVATIONS_RESOLUTION_FAILED: &str = "CapacityReservationsResolutionFailed";

/// The conditions `Ready` depends on, in alphabetical order: with `reserved_capacity`
/// (Karpenter's `ReservedCapacity` gate) `CapacityReservationsReady` too.
pub fn ready_dependents(reserved_capacity: bool) -> Vec<&'static str> {
    let mut all: Vec<&'static str> = READY_DEPENDS_ON.to_vec();
    if reserved_capacity {
        all.push(CONDITION_CAPACITY_RESERVATIONS_READY);
    }
    all.sort_unstable();
    all
}

/// Whether the class's reservations were read before (its `CapacityReservationsReady` is True).
pub fn reservations_were_ready(conditions: &[Condition]) -> bool {
    find_condition(conditions, CONDITION_CAPACITY_RESERVATIONS_READY).is_some_and(Condition::is_true)
}

/// Sets `CapacityReservationsReady` after a read of the class's reservations: True when `read`
/// succeeded; on a failure (the error's text), a True condition stays, anything else becomes
/// Unknown with [`RESERVATIONS_RESOLUTION_FAILED`].
pub fn set_reservations_read(
    conditions: &mut Vec<Condition>,
    read: Result<(), String>,
    now: Timestamp,
    generation: Option<i64>,
) {
    let (status, reason, message) = match read {
        Ok(()) => ("True", CONDITION_CAPACITY_RESERVATIONS_READY, None),
        Err(_) if reservations_were_ready(conditions) => return,
        Err(e) => ("Unknown", RESERVATIONS_RESOLUTION_FAILED, Some(e)),
    };
    set_condition(
        conditions,
        Condition {
            type_: CONDITION_CAPACITY_RESERVATIONS_READY.to_string(),
            status: status.to_string(),
            reason: Some(reason.to_string()),
            message,
            last_transition_time: Some(Time(now)),
            observed_generation: generation,
        },
    );
}

/// Sets `Ready` over the dependents ([`ready_dependents`]) and sorts the conditions by type.
pub fn set_ready(conditions: &mut Vec<Condition>, reserved_capacity: bool, now: Timestamp, generation: Option<i64>) {
    let mut ready = root_condition(conditions, CONDITION_READY, &ready_dependents(reserved_capacity));
    ready.last_transition_time = Some(Time(now));
    ready.observed_generation = generation;
    set_condition(conditions, ready);
    conditions.sort_by(|a, b| a.type_.cmp(&b.type_));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn condition(type_: &str, status: &str) -> Condition {
        Condition {
            type_: type_.to_string(),
            status: status.to_string(),
            reason: Some(type_.to_string()),
            message: None,
            last_transition_time: None,
            observed_generation: None,
        }
    }

    fn healthy() -> Vec<Condition> {
        READY_DEPENDS_ON.iter().map(|t| condition(t, "True")).collect()
    }

    fn ready(conditions: &[Condition]) -> (String, Option<String>) {
        let c = find_condition(conditions, CONDITION_READY).unwrap();
        (c.status.clone(), c.reason.clone())
    }

    #[test]
    fn with_the_gate_reservations_that_were_never_read_hold_ready_back_naming_them() {
        let mut c = healthy();
        set_reservations_read(
            &mut c,
            Err("ec2:DescribeCapacityReservations: throttled".into()),
            Timestamp::UNIX_EPOCH,
            None,
        );
        set_ready(&mut c, true, Timestamp::UNIX_EPOCH, None);
        assert_eq!(ready(&c), ("Unknown".to_string(), Some(RESERVATIONS_RESOLUTION_FAILED.to_string())));
        let msg = find_condition(&c, CONDITION_READY).unwrap().message.clone();
        assert_eq!(msg.as_deref(), Some("ec2:DescribeCapacityReservations: throttled"));
        // Without the gate they do not count.
        set_ready(&mut c, false, Timestamp::UNIX_EPOCH, None);
        assert_eq!(ready(&c).0, "True");
    }

    #[test]
    fn a_failed_read_after_a_good_one_keeps_the_class_ready() {
        let mut c = healthy();
        set_reservations_read(&mut c, Ok(()), Timestamp::UNIX_EPOCH, None);
        set_ready(&mut c, true, Timestamp::UNIX_EPOCH, None);
        assert_eq!(ready(&c).0, "True");
        set_reservations_read(&mut c, Err("throttled".into()), Timestamp::UNIX_EPOCH, None);
        set_ready(&mut c, true, Timestamp::UNIX_EPOCH, None);
        assert_eq!(ready(&c).0, "True");
    }

    #[test]
    fn a_false_dependent_wins_over_one_not_yet_read() {
        let mut c = healthy();
        set_condition(
            &mut c,
            Condition { reason: Some("SubnetsNotFound".into()), ..condition("SubnetsReady", "False") },
        );
        set_ready(&mut c, true, Timestamp::UNIX_EPOCH, None);
        assert_eq!(ready(&c), ("False".to_string(), Some("SubnetsNotFound".to_string())));
        assert_eq!(
            ready_dependents(true),
            [
                "AMIsReady",
                "CapacityReservationsReady",
                "InstanceProfileReady",
                "SecurityGroupsReady",
                "SubnetsReady",
                "ValidationSucceeded"
            ]
        );
    }
}
