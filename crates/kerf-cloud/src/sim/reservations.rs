//! Capacity reservations in the simulated account: on-demand capacity reservations (ODCRs) and
//! capacity blocks, as the scenario's `cloud.capacityReservations` declares them
//! (docs/design.md, "Capacity reservations").
//!
//! A reservation holds `count` instances of one type in one zone from `start` to `end` (offsets
//! from t=0). An EC2NodeClass whose `capacityReservationSelectorTerms` select it lists it in its
//! status while it is active; its instance type then has a `reserved` offering in its zone, at
//! the declared price (default 0: prepaid), available while the reservation has room. A
//! capacity block's instances are drained ahead of its end: EC2 reclaims them
//! [`CAPACITY_BLOCK_RECLAIM_BEFORE_END`] before the end, and the cloud warns
//! [`CAPACITY_BLOCK_DRAIN_AHEAD`] before that, as Karpenter starts draining then. An
//! interruptible reservation (`interruptible: true`) may be taken back by its owner at
//! `reclaimAt`: its instances get an interruption notice then, and EC2 terminates them
//! [`INTERRUPTIBLE_RECLAIM_AFTER_NOTICE`] later.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kerf_api::ec2nodeclass::{CapacityReservationSelectorTerm, CapacityReservationStatus};
use kerf_api::{GoDuration, InstanceType, Offering, OfferingReservation, labels};
use serde::{Deserialize, Serialize};

use super::config::SimConfigError;
use crate::clock::{Timestamp, add};

/// The simulated account's id: the owner of reservations that name none.
pub const ACCOUNT_ID: &str = "123456789012";

/// `type` of an on-demand capacity reservation.
pub const RESERVATION_TYPE_DEFAULT: &str = "default";
/// `type` of a capacity block for ML.
pub const RESERVATION_TYPE_CAPACITY_BLOCK: &str = "capacity-block";

/// How long before a capacity block's end EC2 starts terminating its instances.
pub const CAPACITY_BLOCK_RECLAIM_BEFORE_END: Duration = Duration::from_secs(30 * 60);
/// How long before EC2's termination Karpenter starts draining a capacity block's nodes.
pub const CAPACITY_BLOCK_DRAIN_AHEAD: Duration = Duration::from_secs(10 * 60);
/// How long after the interruption notice EC2 terminates the instances of an interruptible
/// reservation its owner reclaims.
pub const INTERRUPTIBLE_RECLAIM_AFTER_NOTICE: Duration = Duration::from_secs(2 * 60);

/// One reservation, as the scenario declares it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CapacityReservation {
    /// `cr-` and lowercase letters and digits.
    pub id: String,
    pub instance_type: String,
    pub zone: String,
    /// Instances it holds. Default 1.
    #[serde(default = "default_count")]
    pub count: u32,
    /// `default` (an ODCR) or `capacity-block`. Default `default`.
    #[serde(default = "default_type", rename = "type")]
    pub reservation_type: String,
    /// `targeted` or `open`. Default `targeted`.
    #[serde(default = "default_criteria")]
    pub instance_match_criteria: String,
    /// Default the simulated account's.
    #[serde(default = "default_owner", rename = "ownerID")]
    pub owner_id: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    /// When it becomes active (offset from t=0). Default 0s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<GoDuration>,
    /// When it ends (offset from t=0); required for a capacity block. Default: never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end: Option<GoDuration>,
    /// $/h of an instance running in it, as decisions and reports count it. Default 0: prepaid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price: Option<f64>,
    /// An interruptible reservation: its owner may take the capacity back. Default false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub interruptible: bool,
    /// When the owner of an interruptible reservation takes it back (offset from t=0): its
    /// instances get an interruption notice then and are terminated
    /// [`INTERRUPTIBLE_RECLAIM_AFTER_NOTICE`] later; nothing launches into it from then on.
    #[serde(default, rename = "reclaimAt", skip_serializing_if = "Option::is_none")]
    pub reclaim: Option<GoDuration>,
}

fn default_count() -> u32 {
    1
}
fn default_type() -> String {
    RESERVATION_TYPE_DEFAULT.to_string()
}
fn default_criteria() -> String {
    "targeted".to_string()
}
fn default_owner() -> String {
    ACCOUNT_ID.to_string()
}

/// `capacityReservations[i].field`.
fn at_field(i: usize, field: &str) -> String {
    format!("capacityReservations[{i}].{field}")
}

/// Whether `id` is a reservation id: `cr-` and at least one lowercase letter or digit.
fn well_formed_id(id: &str) -> bool {
    id.strip_prefix("cr-")
        .is_some_and(|rest| !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()))
}

/// Checks the list on its own (the catalog and zones are the provider's to check): every field
/// well-formed, ids unique, a capacity block with an end, an end after the start.
pub fn validate(list: &[CapacityReservation]) -> Result<(), SimConfigError> {
    let mut ids = BTreeSet::new();
    for (i, r) in list.iter().enumerate() {
        let at = |f: &str| format!("capacityReservations[{i}].{f}");
        if !well_formed_id(&r.id) {
            return Err(SimConfigError::new(
                at("id"),
                format!("{:?} is not a capacity reservation id (cr- and lowercase letters or digits)", r.id),
            ));
        }
        if !ids.insert(r.id.as_str()) {
            return Err(SimConfigError::new(at("id"), format!("reservation {} is declared twice", r.id)));
        }
        if r.instance_type.is_empty() {
            return Err(SimConfigError::new(at("instanceType"), "required"));
        }
        if r.zone.is_empty() {
            return Err(SimConfigError::new(at("zone"), "required"));
        }
        if r.count == 0 {
            return Err(SimConfigError::new(at("count"), "must be at least 1"));
        }
        if ![RESERVATION_TYPE_DEFAULT, RESERVATION_TYPE_CAPACITY_BLOCK].contains(&r.reservation_type.as_str()) {
            return Err(SimConfigError::new(
                at("type"),
                format!("{:?} is not one of default, capacity-block", r.reservation_type),
            ));
        }
        if !["targeted", "open"].contains(&r.instance_match_criteria.as_str()) {
            return Err(SimConfigError::new(
                at("instanceMatchCriteria"),
                format!("{:?} is not one of targeted, open", r.instance_match_criteria),
            ));
        }
        if r.owner_id.len() != 12 || !r.owner_id.bytes().all(|b| b.is_ascii_digit()) {
            return Err(SimConfigError::new(at("ownerID"), format!("{:?} is not a 12-digit account id", r.owner_id)));
        }
        match r.end {
            None if r.is_capacity_block() => {
                return Err(SimConfigError::new(at("end"), "required: a capacity block has an end time"));
            }
            Some(end) if end.as_duration() <= r.starts() => {
                return Err(SimConfigError::new(
                    at("end"),
                    format!("{end} is not after the start ({})", GoDuration(r.starts())),
                ));
            }
            _ => {}
        }
        if let Some(at) = r.reclaim {
            if !r.interruptible {
                return Err(SimConfigError::new(
                    at_field(i, "reclaimAt"),
                    "only an interruptible reservation is reclaimed (set interruptible: true)",
                ));
            }
            if at.as_duration() < r.starts() || r.end.is_some_and(|e| at.as_duration() >= e.as_duration()) {
                return Err(SimConfigError::new(
                    at_field(i, "reclaimAt"),
                    format!("{at} is not while the reservation is active (from its start to its end)"),
                ));
            }
        }
        if r.interruptible && r.is_capacity_block() {
            return Err(SimConfigError::new(at_field(i, "interruptible"), "a capacity block is not interruptible"));
        }
        if let Some(p) = r.price
            && (!p.is_finite() || p < 0.0)
        {
            return Err(SimConfigError::new(at("price"), format!("price {p} must be a non-negative number")));
        }
    }
    Ok(())
}

impl CapacityReservation {
    pub fn is_capacity_block(&self) -> bool {
        self.reservation_type == RESERVATION_TYPE_CAPACITY_BLOCK
    }

    /// When it becomes active, from t=0.
    pub fn starts(&self) -> Duration {
        self.start.map_or(Duration::ZERO, |s| s.as_duration())
    }

    /// When EC2 takes the instances back, from t=0: a capacity block's ahead of its end (never
    /// before its start), an interruptible reservation's after the notice of its reclaim.
    pub fn reclaim_at(&self) -> Option<Duration> {
        if let Some(at) = self.reclaim.filter(|_| self.interruptible) {
            return Some(at.as_duration() + INTERRUPTIBLE_RECLAIM_AFTER_NOTICE);
        }
        let end = self.end?.as_duration();
        self.is_capacity_block().then(|| end.saturating_sub(CAPACITY_BLOCK_RECLAIM_BEFORE_END).max(self.starts()))
    }

    /// When its nodes get their notice and are drained ahead of the reclaim, from t=0: a capacity
    /// block's as Karpenter starts draining, an interruptible reservation's at its reclaim.
    pub fn drain_at(&self) -> Option<Duration> {
        if let Some(at) = self.reclaim.filter(|_| self.interruptible) {
            return Some(at.as_duration());
        }
        self.reclaim_at().map(|r| r.saturating_sub(CAPACITY_BLOCK_DRAIN_AHEAD).max(self.starts()))
    }

    /// Whether it exists for the account at `t` (from its start to its end).
    pub fn active_at(&self, t: Duration) -> bool {
        self.starts() <= t && self.end.is_none_or(|e| t < e.as_duration())
    }

    /// Whether instances may launch into it at `t`: active, and for a capacity block not yet
    /// draining.
    pub fn launchable_at(&self, t: Duration) -> bool {
        self.active_at(t) && self.drain_at().is_none_or(|d| t < d)
    }

    /// The $/h of an instance in it.
    pub fn price(&self) -> f64 {
        self.price.unwrap_or(0.0)
    }

    /// Whether a selector term picks it: every field the term sets matches.
    pub fn matches(&self, term: &CapacityReservationSelectorTerm) -> bool {
        term.id.as_ref().is_none_or(|id| *id == self.id)
            && term.owner_id.as_ref().is_none_or(|o| *o == self.owner_id)
            && term.instance_match_criteria.as_ref().is_none_or(|c| *c == self.instance_match_criteria)
            && term.tags.iter().all(|(k, v)| self.tags.get(k).is_some_and(|t| tag_matches(v, t)))
    }

    /// The entry a node class's status lists for it at `t` (`epoch` is t=0's instant).
    pub fn status(&self, epoch: Timestamp, t: Duration) -> CapacityReservationStatus {
        let expiring = self.is_capacity_block() && self.drain_at().is_some_and(|d| t >= d);
        CapacityReservationStatus {
            id: self.id.clone(),
            availability_zone: Some(self.zone.clone()),
            end_time: self.end.map(|e| Time(add(epoch, e.as_duration()))),
            instance_match_criteria: Some(self.instance_match_criteria.clone()),
            instance_type: Some(self.instance_type.clone()),
            owner_id: Some(self.owner_id.clone()),
            reservation_type: Some(self.reservation_type.clone()),
            state: Some(if expiring { "expiring" } else { "active" }.to_string()),
            interruptible: self.interruptible.then_some(true),
        }
    }

    /// Its moments after `t` when what a node class sees of it changes: start, drain, end.
    fn changes_after(&self, t: Duration) -> impl Iterator<Item = Duration> {
        [Some(self.starts()), self.drain_at(), self.end.map(|e| e.as_duration())]
            .into_iter()
            .flatten()
            .filter(move |c| *c > t)
    }
}

/// A tag value of a selector term matches a tag: `*` matches any value.
fn tag_matches(want: &str, have: &str) -> bool {
    want == "*" || want == have
}

/// The reservations `terms` select that are active at `t`, in declaration order: a reservation
/// any term matches.
pub fn select<'a>(
    terms: &[CapacityReservationSelectorTerm],
    list: &'a [CapacityReservation],
    t: Duration,
) -> Vec<&'a CapacityReservation> {
    list.iter().filter(|r| r.active_at(t) && terms.iter().any(|term| r.matches(term))).collect()
}

/// How long after `t` the first reservation that `terms` could select starts, starts draining
/// or ends: when a node class's resolution must be made again.
pub fn next_change(
    terms: &[CapacityReservationSelectorTerm],
    list: &[CapacityReservation],
    t: Duration,
) -> Option<Duration> {
    list.iter()
        .filter(|r| terms.iter().any(|term| r.matches(term)))
        .flat_map(|r| r.changes_after(t))
        .min()
        .map(|c| c - t)
}

/// `types` with a `reserved` offering for each reservation of `open` of their type, in a zone
/// the type is offered in (reached), at the reservation's price; its room is its count less
/// `used(id)` instances, and it is unavailable when none is left.
pub fn with_offerings(
    types: &[Arc<InstanceType>],
    open: &[&CapacityReservation],
    used: impl Fn(&str) -> u32,
) -> Vec<Arc<InstanceType>> {
    types
        .iter()
        .map(|t| {
            let mut own = open
                .iter()
                .filter(|r| r.instance_type == t.name && t.offerings.iter().any(|o| o.zone == r.zone))
                .peekable();
            if own.peek().is_none() {
                return Arc::clone(t);
            }
            let mut with = InstanceType::clone(t);
            for r in own {
                let remaining = r.count.saturating_sub(used(&r.id));
                with.offerings.push(Offering {
                    zone: r.zone.clone(),
                    capacity_type: labels::CAPACITY_TYPE_RESERVED.to_string(),
                    price: r.price(),
                    available: remaining > 0,
                    reservation: Some(Arc::new(OfferingReservation {
                        id: r.id.clone(),
                        reservation_type: r.reservation_type.clone(),
                        remaining,
                        interruptible: r.interruptible,
                    })),
                });
            }
            Arc::new(with)
        })
        .collect()
}

/// Why a claim launched into a capacity reservation no longer matches its node class: the
/// class's resolved status no longer lists the reservation (its selector terms changed, or the
/// reservation ended). `None` for other claims and for classes not resolved yet.
pub fn reservation_drift(claim: &kerf_api::NodeClaim, node_class: &kerf_api::EC2NodeClass) -> Option<String> {
    let id = claim.metadata.labels.as_ref()?.get(labels::CAPACITY_RESERVATION_ID)?;
    let status = node_class.status.as_ref().filter(|s| !s.conditions.is_empty())?;
    (!status.capacity_reservations.iter().any(|r| r.id == *id)).then(|| "CapacityReservationDrift".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> Vec<CapacityReservation> {
        serde_yaml_ng::from_str(yaml).unwrap_or_else(|e| panic!("{e}"))
    }

    fn problem(yaml: &str) -> String {
        validate(&parse(yaml)).unwrap_err().to_string()
    }

    #[test]
    fn the_contract_example_parses_with_every_field() {
        let list = parse(
            "- id: cr-0a1b2c3d4e5f60001\n  instanceType: p5.48xlarge\n  zone: us-west-2a\n  count: 2\n  \
             type: capacity-block\n  instanceMatchCriteria: targeted\n  ownerID: \"123456789012\"\n  \
             tags: {team: ml}\n  start: 0s\n  end: 6h\n  price: 0\n",
        );
        validate(&list).unwrap();
        let r = &list[0];
        assert!(r.is_capacity_block());
        assert_eq!(r.reclaim_at(), Some(Duration::from_secs(6 * 3600 - 30 * 60)));
        assert_eq!(r.drain_at(), Some(Duration::from_secs(6 * 3600 - 40 * 60)));
        assert!(r.launchable_at(Duration::from_secs(5 * 3600)));
        assert!(!r.launchable_at(Duration::from_secs(6 * 3600 - 40 * 60)));
        assert!(r.active_at(Duration::from_secs(6 * 3600 - 1)));
    }

    #[test]
    fn defaults_are_a_targeted_prepaid_odcr_of_one_instance_in_the_account() {
        let r = &parse("- {id: cr-1, instanceType: m5.large, zone: us-west-2a}")[0];
        assert_eq!(
            (r.count, r.reservation_type.as_str(), r.instance_match_criteria.as_str()),
            (1, "default", "targeted")
        );
        assert_eq!((r.owner_id.as_str(), r.price()), (ACCOUNT_ID, 0.0));
        assert_eq!((r.reclaim_at(), r.drain_at()), (None, None));
        assert!(r.launchable_at(Duration::from_secs(1_000_000)));
    }

    #[test]
    fn an_interruptible_reservation_is_reclaimed_two_minutes_after_its_notice() {
        let r = &parse("- {id: cr-1, instanceType: m5.large, zone: us-west-2a, interruptible: true, reclaimAt: 2h}")[0];
        validate(std::slice::from_ref(r)).unwrap();
        assert_eq!(r.drain_at(), Some(Duration::from_secs(2 * 3600)));
        assert_eq!(r.reclaim_at(), Some(Duration::from_secs(2 * 3600 + 120)));
        assert!(r.launchable_at(Duration::from_secs(2 * 3600 - 1)));
        assert!(!r.launchable_at(Duration::from_secs(2 * 3600)));
        let status = r.status(Timestamp::UNIX_EPOCH, Duration::from_secs(2 * 3600));
        assert_eq!((status.interruptible, status.state.as_deref()), (Some(true), Some("active")));
        let plain = &parse("- {id: cr-2, instanceType: m5.large, zone: us-west-2a, interruptible: true}")[0];
        assert_eq!((plain.drain_at(), plain.reclaim_at()), (None, None), "not reclaimed unless told when");
    }

    #[test]
    fn validation_names_the_field_and_the_problem() {
        let base = "instanceType: m5.large, zone: us-west-2a";
        assert_eq!(
            problem(&format!("- {{id: r-1, {base}}}")),
            "cloud.capacityReservations[0].id: \"r-1\" is not a capacity reservation id (cr- and lowercase letters or digits)"
        );
        assert_eq!(
            problem(&format!("- {{id: cr-1, {base}}}\n- {{id: cr-1, {base}}}")),
            "cloud.capacityReservations[1].id: reservation cr-1 is declared twice"
        );
        assert_eq!(
            problem(&format!("- {{id: cr-1, {base}, type: block}}")),
            "cloud.capacityReservations[0].type: \"block\" is not one of default, capacity-block"
        );
        assert_eq!(
            problem(&format!("- {{id: cr-1, {base}, type: capacity-block}}")),
            "cloud.capacityReservations[0].end: required: a capacity block has an end time"
        );
        assert_eq!(
            problem(&format!("- {{id: cr-1, {base}, start: 2h, end: 1h}}")),
            "cloud.capacityReservations[0].end: 1h0m0s is not after the start (2h0m0s)"
        );
        assert_eq!(
            problem(&format!("- {{id: cr-1, {base}, count: 0}}")),
            "cloud.capacityReservations[0].count: must be at least 1"
        );
        assert_eq!(
            problem(&format!("- {{id: cr-1, {base}, instanceMatchCriteria: any}}")),
            "cloud.capacityReservations[0].instanceMatchCriteria: \"any\" is not one of targeted, open"
        );
        assert_eq!(
            problem(&format!("- {{id: cr-1, {base}, ownerID: \"12\"}}")),
            "cloud.capacityReservations[0].ownerID: \"12\" is not a 12-digit account id"
        );
        assert_eq!(
            problem(&format!("- {{id: cr-1, {base}, price: -1}}")),
            "cloud.capacityReservations[0].price: price -1 must be a non-negative number"
        );
        assert_eq!(
            problem(&format!("- {{id: cr-1, {base}, reclaimAt: 1h}}")),
            "cloud.capacityReservations[0].reclaimAt: only an interruptible reservation is reclaimed (set interruptible: true)"
        );
        assert_eq!(
            problem(&format!("- {{id: cr-1, {base}, interruptible: true, end: 1h, reclaimAt: 2h}}")),
            "cloud.capacityReservations[0].reclaimAt: 2h0m0s is not while the reservation is active (from its start to its end)"
        );
        assert_eq!(
            problem(&format!("- {{id: cr-1, {base}, type: capacity-block, end: 2h, interruptible: true}}")),
            "cloud.capacityReservations[0].interruptible: a capacity block is not interruptible"
        );
        let err = serde_yaml_ng::from_str::<Vec<CapacityReservation>>(&format!("- {{id: cr-1, {base}, size: 2}}"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown field `size`"), "{err}");
    }

    #[test]
    fn terms_select_by_id_tags_and_owner_and_only_while_active() {
        let list = parse(
            "- {id: cr-a, instanceType: m5.large, zone: us-west-2a, tags: {team: ml}}\n\
             - {id: cr-b, instanceType: m5.large, zone: us-west-2a, ownerID: \"210987654321\", start: 1h}\n",
        );
        let term = |yaml: &str| -> Vec<CapacityReservationSelectorTerm> { serde_yaml_ng::from_str(yaml).unwrap() };
        let ids = |terms: &[CapacityReservationSelectorTerm], t: u64| -> Vec<String> {
            select(terms, &list, Duration::from_secs(t)).iter().map(|r| r.id.clone()).collect()
        };
        assert_eq!(ids(&term("[{tags: {team: ml}}]"), 0), ["cr-a"]);
        assert_eq!(ids(&term("[{tags: {team: '*'}}]"), 0), ["cr-a"]);
        assert_eq!(ids(&term("[{id: cr-b}]"), 0), Vec::<String>::new());
        assert_eq!(ids(&term("[{id: cr-b}]"), 3600), ["cr-b"]);
        assert_eq!(ids(&term("[{ownerID: \"210987654321\"}, {id: cr-a}]"), 3600), ["cr-a", "cr-b"]);
        assert_eq!(ids(&term("[{id: cr-a, ownerID: \"210987654321\"}]"), 3600), Vec::<String>::new());
        assert_eq!(next_change(&term("[{id: cr-b}]"), &list, Duration::ZERO), Some(Duration::from_secs(3600)));
        assert_eq!(next_change(&term("[{id: cr-a}]"), &list, Duration::ZERO), None);
    }
}
