//! The simulated cloud's capacity reservations at run time: the reserved offerings a node class's
//! types gain (with the room each reservation has left), capacity blocks warned ahead of their
//! end, and the room a provider keeping its instances elsewhere (kwok) counts there. What a
//! reservation is and how it is declared: [`crate::sim::reservations`].

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use super::{Interruption, SharedTypes, SimProvider, State};
use crate::clock::Timestamp;
use crate::provider::InterruptionKind;
use crate::sim::reservations::{CapacityReservation, with_offerings};

impl SimProvider {
    /// Makes every read of the account's capacity reservations fail with `error` (`None`: they
    /// succeed again), as a DescribeCapacityReservations call EC2 refuses: node classes resolved
    /// meanwhile keep the reservations they listed, and one never read is not Ready (see
    /// [`crate::nodeclass_ready`]).
    pub fn fail_reservation_reads(&self, error: Option<String>) {
        self.lock().reservation_read_error = error;
    }

    /// Queues a notice for each instance of a capacity block that is due to be drained (the
    /// block ends soon) or of an interruptible reservation its owner reclaims, once per instance.
    pub(super) fn warn_ending_blocks(&self) {
        let now = self.clock.now();
        let t = self.offset(now);
        let mut state = self.lock();
        let State { instances, block_warned, interruptions, .. } = &mut *state;
        for l in instances.iter() {
            let i = &l.instance;
            let Some(reclaim_at) = i.reclaim_at else { continue };
            let reservation = i.capacity_reservation.as_deref().and_then(|id| self.reservation(id));
            let due = reservation.and_then(|r| r.drain_at());
            if due.is_none_or(|d| t < d) || Self::observed_terminated(i, now) || block_warned.contains(&i.provider_id) {
                continue;
            }
            block_warned.insert(i.provider_id.clone());
            interruptions.push(Interruption {
                provider_id: i.provider_id.clone(),
                node_name: i.node_name.clone(),
                node_claim: i.node_claim.clone(),
                capacity_type: i.capacity_type.clone(),
                kind: match reservation.is_some_and(|r| r.interruptible) {
                    true => InterruptionKind::CapacityReservationInterruption,
                    false => InterruptionKind::CapacityBlockEnding,
                },
                at: now,
                reclaim_at: Some(reclaim_at),
            });
        }
    }

    /// Terminates the running instance launched for NodeClaim `node_claim`, if any: for a
    /// provider that keeps its instances elsewhere (kwok's Nodes) and launches through this one,
    /// so that what it removed no longer holds room in a capacity reservation.
    pub fn release(&self, node_claim: &str) {
        let now = self.clock.now();
        let mut state = self.lock();
        for l in state.instances.iter_mut().filter(|l| l.instance.node_claim == node_claim) {
            if !Self::observed_terminated(&l.instance, now) {
                l.instance.terminated = true;
                l.instance.terminated_at = Some(now);
            }
        }
    }

    /// Takes `used` (reservation id → the NodeClaims whose instances are in it) as found where a
    /// provider keeps its instances (kwok's Nodes, named after their claims, which outlive a
    /// restarted controller): a reservation's room is its count less these claims and this
    /// provider's own live launches into it, each claim counted once.
    pub fn set_reservation_usage(&self, used: BTreeMap<String, BTreeSet<String>>) {
        self.lock().reservation_usage = used;
    }

    /// The declared reservation with this id.
    pub(super) fn reservation(&self, id: &str) -> Option<&CapacityReservation> {
        self.config.capacity_reservations.iter().find(|r| r.id == id)
    }

    /// Virtual time since t=0 at `now`.
    pub(super) fn offset(&self, now: Timestamp) -> Duration {
        Duration::from_millis((now.as_millisecond() - self.epoch.as_millisecond()).max(0) as u64)
    }

    /// `types` (a class's, sorted by name) with a `reserved` offering for each capacity
    /// reservation the class selected that instances can launch into now, each with the room it
    /// has left (unavailable when full). A class that selected none gets `types` as they are.
    pub(super) fn with_reservations(
        &self,
        state: &State,
        class: &str,
        types: SharedTypes,
        now: Timestamp,
    ) -> SharedTypes {
        let Some(ids) = state.reservations.get(class).filter(|ids| !ids.is_empty()) else { return types };
        let t = self.offset(now);
        let open: Vec<&CapacityReservation> =
            ids.iter().filter_map(|id| self.reservation(id)).filter(|r| r.launchable_at(t)).collect();
        if open.is_empty() {
            return types;
        }
        let used = Self::reservation_use(state, now);
        let count = |id: &str| used.get(id).copied().unwrap_or(0);
        Arc::new(with_offerings(&types, &open, count))
    }

    /// Reservation id → how many claims' instances are in it: those found elsewhere and this
    /// provider's live launches, each claim once.
    fn reservation_use(state: &State, now: Timestamp) -> BTreeMap<String, u32> {
        let mut used: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
        for (id, claims) in &state.reservation_usage {
            used.entry(id.as_str()).or_default().extend(claims.iter().map(String::as_str));
        }
        for l in &state.instances {
            if let Some(id) = &l.instance.capacity_reservation
                && !Self::observed_terminated(&l.instance, now)
            {
                used.entry(id.as_str()).or_default().insert(l.instance.node_claim.as_str());
            }
        }
        used.into_iter().map(|(id, c)| (id.to_string(), u32::try_from(c.len()).unwrap_or(u32::MAX))).collect()
    }

    /// The `open` reservation EC2 puts an on-demand launch of `instance_type` in `zone` into, if
    /// any: only without Karpenter's `ReservedCapacity` gate, whose launches then leave EC2 its
    /// default preference (`open`); with the gate every spot and on-demand launch asks for
    /// `CapacityReservationPreference: none`, as Karpenter's do, and lands in no reservation
    /// (docs/design.md, "Capacity reservations"). The first active one of the type and zone
    /// with room, in declaration order.
    pub(super) fn absorbing_reservation(
        &self,
        state: &State,
        instance_type: &str,
        zone: &str,
        now: Timestamp,
    ) -> Option<&CapacityReservation> {
        if !state.reserved_capacity_off {
            return None;
        }
        let t = self.offset(now);
        let used = Self::reservation_use(state, now);
        self.config.capacity_reservations.iter().find(|r| {
            r.instance_match_criteria == "open"
                && r.instance_type == instance_type
                && r.zone == zone
                && !r.is_capacity_block()
                && r.launchable_at(t)
                && used.get(&r.id).copied().unwrap_or(0) < r.count
        })
    }
}
