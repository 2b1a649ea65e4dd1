//! Capacity reservations on EC2: on-demand capacity reservations (ODCRs) and capacity blocks
//! (docs/design.md, "Capacity reservations"). A node class's `capacityReservationSelectorTerms`
//! are resolved with DescribeCapacityReservations (active reservations only) into its
//! `status.capacityReservations`, as Karpenter writes them; each selected reservation gives its
//! instance type a `reserved` offering in its zone with the room EC2 reports
//! (`AvailableInstanceCount`), at $0 an hour (prepaid, as the simulated cloud prices them by
//! default).

use std::collections::BTreeMap;
use std::sync::Arc;

use aws_sdk_ec2::types::Filter;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kerf_api::ec2nodeclass::{CapacityReservationSelectorTerm, CapacityReservationStatus};
use kerf_api::{InstanceType, Offering, OfferingReservation, labels};

use crate::AwsClients;
use crate::error::AwsError;
use crate::nodeclass::network::tag_filters;

/// `reservationType` of an on-demand capacity reservation.
pub const TYPE_DEFAULT: &str = "default";
/// `reservationType` of a capacity block for ML.
pub const TYPE_CAPACITY_BLOCK: &str = "capacity-block";
/// How long before a capacity block's end its status reads `expiring` (Karpenter drains its
/// nodes from then on; EC2 reclaims them 30 minutes before the end).
pub const CAPACITY_BLOCK_EXPIRING_BEFORE_END: std::time::Duration = std::time::Duration::from_secs(40 * 60);
/// How long before a capacity block's end EC2 reclaims its instances.
pub const CAPACITY_BLOCK_RECLAIMED_BEFORE_END: std::time::Duration = std::time::Duration::from_secs(30 * 60);
/// The $/h of an instance in a reservation: prepaid.
pub const RESERVED_PRICE: f64 = 0.0;

/// One active reservation a node class selected.
#[derive(Debug, Clone, PartialEq)]
pub struct Reservation {
    pub id: String,
    pub instance_type: String,
    pub zone: String,
    pub owner_id: Option<String>,
    /// `open` or `targeted`.
    pub instance_match_criteria: Option<String>,
    /// [`TYPE_DEFAULT`] or [`TYPE_CAPACITY_BLOCK`].
    pub reservation_type: String,
    pub end_time: Option<kerf_cloud::Timestamp>,
    /// Instances it can still take (`AvailableInstanceCount`).
    pub available: u32,
    /// Its owner may take the capacity back (`Interruptible`).
    pub interruptible: bool,
}

impl Reservation {
    /// The entry a node class's status lists for it at `now`.
    pub fn status(&self, now: kerf_cloud::Timestamp) -> CapacityReservationStatus {
        let expiring = self.reservation_type == TYPE_CAPACITY_BLOCK
            && self.end_time.is_some_and(|end| kerf_cloud::clock::add(now, CAPACITY_BLOCK_EXPIRING_BEFORE_END) >= end);
        CapacityReservationStatus {
            id: self.id.clone(),
            availability_zone: Some(self.zone.clone()),
            end_time: self.end_time.map(Time),
            instance_match_criteria: self.instance_match_criteria.clone(),
            instance_type: Some(self.instance_type.clone()),
            owner_id: self.owner_id.clone(),
            reservation_type: Some(self.reservation_type.clone()),
            state: Some(if expiring { "expiring" } else { "active" }.to_string()),
            interruptible: self.interruptible.then_some(true),
        }
    }

    fn from_ec2(r: &aws_sdk_ec2::types::CapacityReservation) -> Option<Reservation> {
        let end_time = r
            .end_date()
            .and_then(|d| kerf_cloud::Timestamp::from_second(d.secs()).ok())
            .filter(|_| r.end_date_type().is_none_or(|t| t.as_str() == "limited"));
        Some(Reservation {
            id: r.capacity_reservation_id()?.to_string(),
            instance_type: r.instance_type()?.to_string(),
            zone: r.availability_zone()?.to_string(),
            owner_id: r.owner_id().map(str::to_string),
            instance_match_criteria: r.instance_match_criteria().map(|c| c.as_str().to_string()),
            reservation_type: r.reservation_type().map_or(TYPE_DEFAULT, |t| t.as_str()).to_string(),
            end_time,
            available: u32::try_from(r.available_instance_count().unwrap_or(0)).unwrap_or(0),
            interruptible: r.interruptible().unwrap_or(false),
        })
    }
}

/// One DescribeCapacityReservations query, every page: `ids` (none: every reservation the
/// filters select) and `filters`, active reservations only. An id EC2 does not know selects
/// nothing rather than failing the rest.
async fn describe(clients: &AwsClients, ids: &[String], filters: Vec<Filter>) -> Result<Vec<Reservation>, AwsError> {
    let mut filters = filters;
    filters.push(Filter::builder().name("state").values("active").build());
    let mut out = Vec::new();
    let mut token = None;
    loop {
        let answer = clients
            .ec2
            .describe_capacity_reservations()
            .set_capacity_reservation_ids((!ids.is_empty()).then(|| ids.to_vec()))
            .set_filters(Some(filters.clone()))
            .set_next_token(token)
            .send()
            .await;
        let page = match answer {
            Ok(p) => p,
            Err(e) => {
                let e = AwsError::from_sdk("ec2:DescribeCapacityReservations", e);
                if e.is_not_found() && !ids.is_empty() {
                    return Ok(out);
                }
                return Err(e);
            }
        };
        out.extend(page.capacity_reservations().iter().filter_map(Reservation::from_ec2));
        token = page.next_token().map(str::to_string);
        if token.is_none() {
            return Ok(out);
        }
    }
}

/// The active reservations any of `terms` selects (a term's fields all match; `*` as a tag
/// value matches any value), by id.
pub async fn select(
    clients: &AwsClients,
    terms: &[CapacityReservationSelectorTerm],
) -> Result<BTreeMap<String, Reservation>, AwsError> {
    let mut found = BTreeMap::new();
    for term in terms {
        let mut filters = tag_filters(&term.tags);
        if let Some(owner) = &term.owner_id {
            filters.push(Filter::builder().name("owner-id").values(owner).build());
        }
        if let Some(criteria) = &term.instance_match_criteria {
            filters.push(Filter::builder().name("instance-match-criteria").values(criteria).build());
        }
        let ids: Vec<String> = term.id.iter().cloned().collect();
        if ids.is_empty() && filters.is_empty() {
            continue;
        }
        for r in describe(clients, &ids, filters).await? {
            found.insert(r.id.clone(), r);
        }
    }
    Ok(found)
}

/// The reservations with these ids as EC2 describes them now (the room each has left); those
/// no longer active are left out.
pub async fn describe_ids(clients: &AwsClients, ids: &[String]) -> Result<Vec<Reservation>, AwsError> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    describe(clients, ids, Vec::new()).await
}

/// Whether nothing launches into the reservation at `now`: a capacity block from
/// [`CAPACITY_BLOCK_EXPIRING_BEFORE_END`] before its end (whether or not the status was
/// resolved again since), or one the status says is expiring.
pub fn closed(r: &CapacityReservationStatus, now: kerf_cloud::Timestamp) -> bool {
    r.state.as_deref() == Some("expiring")
        || (r.reservation_type.as_deref() == Some(TYPE_CAPACITY_BLOCK)
            && r.end_time
                .as_ref()
                .is_some_and(|end| kerf_cloud::clock::add(now, CAPACITY_BLOCK_EXPIRING_BEFORE_END) >= end.0))
}

/// How long from `now` until the next of `reservations` closes (see [`closed`]), if one will.
pub fn next_closing(
    reservations: &[CapacityReservationStatus],
    now: kerf_cloud::Timestamp,
) -> Option<std::time::Duration> {
    let before = i64::try_from(CAPACITY_BLOCK_EXPIRING_BEFORE_END.as_millis()).unwrap_or(i64::MAX);
    reservations
        .iter()
        .filter(|r| r.reservation_type.as_deref() == Some(TYPE_CAPACITY_BLOCK) && !closed(r, now))
        .filter_map(|r| r.end_time.as_ref())
        .map(|end| end.0.as_millisecond() - before - now.as_millisecond())
        .filter(|ms| *ms > 0)
        .min()
        .map(|ms| std::time::Duration::from_millis(u64::try_from(ms).unwrap_or(0)))
}

/// `types` with a `reserved` offering for each of `reservations` of their type that is not
/// [`closed`] at `now`, in a zone the type is offered in, with the room `remaining(id)` says it
/// has (unavailable when none).
pub fn with_offerings(
    types: Vec<Arc<InstanceType>>,
    reservations: &[CapacityReservationStatus],
    remaining: impl Fn(&str) -> u32,
    now: kerf_cloud::Timestamp,
) -> Vec<Arc<InstanceType>> {
    if reservations.is_empty() {
        return types;
    }
    types
        .into_iter()
        .map(|t| {
            let own: Vec<&CapacityReservationStatus> = reservations
                .iter()
                .filter(|r| {
                    r.instance_type.as_deref() == Some(t.name.as_str())
                        && !closed(r, now)
                        && r.availability_zone.as_ref().is_some_and(|z| t.offerings.iter().any(|o| o.zone == *z))
                })
                .collect();
            if own.is_empty() {
                return t;
            }
            let mut with = InstanceType::clone(&t);
            for r in own {
                let room = remaining(&r.id);
                with.offerings.push(Offering {
                    zone: r.availability_zone.clone().unwrap_or_default(),
                    capacity_type: labels::CAPACITY_TYPE_RESERVED.to_string(),
                    price: RESERVED_PRICE,
                    available: room > 0,
                    reservation: Some(Arc::new(OfferingReservation {
                        id: r.id.clone(),
                        reservation_type: r.reservation_type.clone().unwrap_or_else(|| TYPE_DEFAULT.to_string()),
                        remaining: room,
                        interruptible: r.interruptible.unwrap_or(false),
                    })),
                });
            }
            Arc::new(with)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn itype(name: &str) -> Arc<InstanceType> {
        Arc::new(InstanceType {
            name: name.to_string(),
            labels: BTreeMap::new(),
            capacity: kerf_api::ResourceList::new(),
            overhead: kerf_api::ResourceList::new(),
            offerings: vec![Offering {
                zone: "us-west-2a".into(),
                capacity_type: "on-demand".into(),
                price: 0.1,
                available: true,
                reservation: None,
            }],
            price_estimated: false,
        })
    }

    fn status(id: &str, t: &str, zone: &str, state: &str) -> CapacityReservationStatus {
        CapacityReservationStatus {
            id: id.into(),
            availability_zone: Some(zone.into()),
            instance_type: Some(t.into()),
            reservation_type: Some(TYPE_CAPACITY_BLOCK.into()),
            state: Some(state.into()),
            ..CapacityReservationStatus::default()
        }
    }

    #[test]
    fn a_reservation_adds_a_reserved_offering_with_its_room_in_its_zone_only() {
        let rs = [
            status("cr-1", "m5.large", "us-west-2a", "active"),
            status("cr-2", "m5.large", "us-west-2a", "active"),
            status("cr-3", "m5.large", "us-west-2b", "active"),
            status("cr-4", "m5.large", "us-west-2a", "expiring"),
        ];
        let now: kerf_cloud::Timestamp = "2026-01-01T00:00:00Z".parse().unwrap_or_else(|e| panic!("{e}"));
        let out =
            with_offerings(vec![itype("m5.large"), itype("c5.large")], &rs, |id| u32::from(id == "cr-1") * 2, now);
        let reserved: Vec<(&str, bool, u32)> = out[0]
            .offerings
            .iter()
            .filter_map(|o| o.reservation.as_ref().map(|r| (r.id.as_str(), o.available, r.remaining)))
            .collect();
        assert_eq!(reserved, vec![("cr-1", true, 2), ("cr-2", false, 0)]);
        assert!(out[0].offerings.iter().filter(|o| o.reservation.is_some()).all(|o| o.capacity_type == "reserved"));
        assert_eq!(out[1].offerings.len(), 1, "a type no reservation holds is unchanged");
    }

    #[test]
    fn a_capacity_block_is_closed_to_launches_forty_minutes_before_its_end_even_in_a_stale_status() {
        let end: kerf_cloud::Timestamp = "2026-01-01T06:00:00Z".parse().unwrap_or_else(|e| panic!("{e}"));
        let mut block = status("cr-b", "m5.large", "us-west-2a", "active");
        block.end_time = Some(Time(end));
        let at = |s: &str| -> kerf_cloud::Timestamp { s.parse().unwrap_or_else(|e| panic!("{e}")) };
        let reserved = |now: &str| {
            with_offerings(vec![itype("m5.large")], std::slice::from_ref(&block), |_| 1, at(now))[0]
                .offerings
                .iter()
                .any(|o| o.reservation.is_some())
        };
        assert!(reserved("2026-01-01T05:19:59Z"));
        assert!(!reserved("2026-01-01T05:20:00Z"), "closed although the status still reads active");
        assert_eq!(
            next_closing(std::slice::from_ref(&block), at("2026-01-01T05:00:00Z")),
            Some(std::time::Duration::from_secs(20 * 60))
        );
        assert_eq!(next_closing(std::slice::from_ref(&block), at("2026-01-01T05:30:00Z")), None);
    }

    #[test]
    fn a_capacity_block_reads_expiring_forty_minutes_before_its_end() {
        let end: kerf_cloud::Timestamp = "2026-01-01T06:00:00Z".parse().unwrap_or_else(|e| panic!("{e}"));
        let r = Reservation {
            id: "cr-1".into(),
            instance_type: "p5.48xlarge".into(),
            zone: "us-west-2a".into(),
            owner_id: None,
            instance_match_criteria: Some("targeted".into()),
            reservation_type: TYPE_CAPACITY_BLOCK.into(),
            end_time: Some(end),
            available: 1,
            interruptible: false,
        };
        let at = |s: &str| r.status(s.parse().unwrap_or_else(|e| panic!("{e}"))).state;
        assert_eq!(at("2026-01-01T05:19:59Z").as_deref(), Some("active"));
        assert_eq!(at("2026-01-01T05:20:00Z").as_deref(), Some("expiring"));
    }
}
