//! The launch rule: what every cloud provider decides the same way when it launches a NodeClaim,
//! and what the scheduler and consolidation read when they price a launch ahead of time: whether an instance type's own labels meet
//! the claim's requirements ([`type_meets`]), whether an offering's zone and capacity type do
//! ([`offering_allowed`]), and the launch rule itself ([`choose`]): which capacity type one launch
//! uses and the offerings it tries, in order. The AWS provider, the simulated provider,
//! consolidation's replacement price and the scheduler's price order all call [`choose`], so
//! what kerf plans to pay is what a launch pays.

use std::sync::Arc;

use crate::labels::{self, CAPACITY_TYPE_ON_DEMAND, CAPACITY_TYPE_RESERVED, CAPACITY_TYPE_SPOT};
use crate::{InstanceType, Offering, Requirement, Requirements};

/// Labels an instance type defines itself: a requirement on one of these that the type lacks
/// fails `In`; other keys (NodePool name, node class, user labels) are the claim's own.
fn is_type_label(key: &str) -> bool {
    key != labels::NODE_POOL
        && key != labels::AWS_EC2_NODE_CLASS
        && key != labels::TOPOLOGY_ZONE_ID
        && labels::WELL_KNOWN_LABELS.contains(&key)
}

/// Whether the type's own labels (and the provider's `region`) meet the claim's requirements.
/// Zone and capacity type are properties of offerings: the caller checks them per offering.
///
/// The instance-type requirement is checked first: a claim names its types (the provisioner
/// writes them), and that one lookup turns most of a catalog away before the rest of a type's
/// labels are read.
pub fn type_meets(reqs: &Requirements, t: &InstanceType, region: &str) -> bool {
    let meets = |key: &str, req: &Requirement| {
        if crate::instance::is_offering_label(key) {
            return true;
        }
        if key == labels::REGION {
            return req.matches(Some(region));
        }
        match t.labels.get(key) {
            Some(v) => req.matches(Some(v)),
            None if is_type_label(key) => req.matches(None),
            None => true,
        }
    };
    reqs.get(labels::INSTANCE_TYPE).is_none_or(|r| meets(labels::INSTANCE_TYPE, r))
        && reqs.iter().all(|(key, req)| key == labels::INSTANCE_TYPE || meets(key, req))
}

/// Whether the claim's requirements allow an offering's zone, capacity type and capacity
/// reservation (the offering's availability is the caller's to check). An offering that is not
/// reserved has no reservation labels: a requirement that one exist (`In`, `Exists`) refuses it.
pub fn offering_allowed(reqs: &Requirements, o: &Offering) -> bool {
    reqs.get(labels::ZONE).is_none_or(|r| r.has(&o.zone))
        && reqs.get(labels::CAPACITY_TYPE).is_none_or(|r| r.has(&o.capacity_type))
        && labels::CAPACITY_RESERVATION_LABELS
            .into_iter()
            .all(|key| reqs.get(key).is_none_or(|r| r.matches(o.label(key))))
}

/// Capacity types in the order a launch prefers them: capacity already paid for, then the
/// cheapest that can be taken back, then on-demand.
pub const CAPACITY_TYPE_ORDER: [&str; 3] = [CAPACITY_TYPE_RESERVED, CAPACITY_TYPE_SPOT, CAPACITY_TYPE_ON_DEMAND];

/// What the launch rule reads of one offer: an offering of one instance type.
pub trait Offer {
    fn type_name(&self) -> &str;
    fn zone(&self) -> &str;
    fn capacity_type(&self) -> &str;
    fn price(&self) -> f64;
}

impl Offer for (&Arc<InstanceType>, &Offering) {
    fn type_name(&self) -> &str {
        &self.0.name
    }
    fn zone(&self) -> &str {
        &self.1.zone
    }
    fn capacity_type(&self) -> &str {
        &self.1.capacity_type
    }
    fn price(&self) -> f64 {
        self.1.price
    }
}

/// The launch rule. `offers` are the offerings a claim allows and that can be launched now; it
/// is left holding those one launch tries, in the order it tries them, and the capacity type
/// they share is returned (`None` when nothing is left):
/// 1. a spot offer pricier than the cheapest on-demand offer is dropped: it saves nothing and can
///    be taken back;
/// 2. the launch uses the first capacity type of [`CAPACITY_TYPE_ORDER`] with any offer left
///    (offers of other capacity types are dropped);
/// 3. its offers are tried cheapest first, then by instance type name, then by zone.
pub fn choose<O: Offer>(offers: &mut Vec<O>) -> Option<&'static str> {
    let cheapest_on_demand = offers
        .iter()
        .filter(|o| o.capacity_type() == CAPACITY_TYPE_ON_DEMAND)
        .map(Offer::price)
        .fold(f64::INFINITY, f64::min);
    offers.retain(|o| o.capacity_type() != CAPACITY_TYPE_SPOT || o.price() <= cheapest_on_demand);
    let capacity_type = CAPACITY_TYPE_ORDER.into_iter().find(|ct| offers.iter().any(|o| o.capacity_type() == *ct))?;
    offers.retain(|o| o.capacity_type() == capacity_type);
    offers.sort_by(|a, b| {
        a.price()
            .total_cmp(&b.price())
            .then_with(|| a.type_name().cmp(b.type_name()))
            .then_with(|| a.zone().cmp(b.zone()))
    });
    Some(capacity_type)
}

/// What one instance type costs to launch under `reqs`: the first offer [`choose`] would try
/// among the type's available offerings the requirements allow. `None` when it has none.
pub fn type_price(t: &Arc<InstanceType>, reqs: &Requirements) -> Option<f64> {
    let mut offers: Vec<(&Arc<InstanceType>, &Offering)> =
        t.offerings.iter().filter(|o| o.available && offering_allowed(reqs, o)).map(|o| (t, o)).collect();
    choose(&mut offers)?;
    offers.first().map(|o| o.price())
}

#[cfg(test)]
mod tests {
    use crate::{Quantity, ResourceList};

    use super::*;

    fn itype(name: &str, offerings: &[(&str, &str, f64)]) -> Arc<InstanceType> {
        Arc::new(InstanceType {
            name: name.to_string(),
            labels: Default::default(),
            capacity: ResourceList::new().with("cpu", Quantity::from_units(2)),
            overhead: ResourceList::new(),
            offerings: offerings
                .iter()
                .map(|&(zone, ct, price)| Offering {
                    zone: zone.into(),
                    capacity_type: ct.into(),
                    price,
                    available: true,
                    reservation: None,
                })
                .collect(),
            price_estimated: false,
        })
    }

    fn offers(types: &[Arc<InstanceType>]) -> Vec<(&Arc<InstanceType>, &Offering)> {
        types.iter().flat_map(|t| t.offerings.iter().map(move |o| (t, o))).collect()
    }

    fn names(offers: &[(&Arc<InstanceType>, &Offering)]) -> Vec<String> {
        offers.iter().map(|o| format!("{}/{}/{}", o.type_name(), o.zone(), o.capacity_type())).collect()
    }

    #[test]
    fn reserved_comes_before_spot_and_spot_before_on_demand() {
        let types = [
            itype("a", &[("z1", "on-demand", 0.10), ("z1", "spot", 0.04)]),
            itype("b", &[("z1", "reserved", 0.20), ("z1", "on-demand", 0.20)]),
        ];
        let mut all = offers(&types);
        assert_eq!(choose(&mut all), Some("reserved"));
        assert_eq!(names(&all), ["b/z1/reserved"]);
        let mut no_reserved: Vec<_> = offers(&types).into_iter().filter(|o| o.capacity_type() != "reserved").collect();
        assert_eq!(choose(&mut no_reserved), Some("spot"));
        assert_eq!(names(&no_reserved), ["a/z1/spot"]);
    }

    #[test]
    fn spot_pricier_than_the_cheapest_on_demand_is_dropped_before_the_capacity_type_is_chosen() {
        // Every spot offer costs more than c's on-demand: the launch is on-demand, not nothing.
        let types =
            [itype("a", &[("z1", "on-demand", 0.30), ("z1", "spot", 0.25)]), itype("c", &[("z1", "on-demand", 0.20)])];
        let mut all = offers(&types);
        assert_eq!(choose(&mut all), Some("on-demand"));
        assert_eq!(names(&all), ["c/z1/on-demand", "a/z1/on-demand"]);
        // Some spot at or under the cheapest on-demand: spot, and only those offers.
        let types = [
            itype("a", &[("z1", "on-demand", 0.30), ("z1", "spot", 0.20), ("z2", "spot", 0.21)]),
            itype("c", &[("z1", "on-demand", 0.20), ("z1", "spot", 0.05)]),
        ];
        let mut all = offers(&types);
        assert_eq!(choose(&mut all), Some("spot"));
        assert_eq!(names(&all), ["c/z1/spot", "a/z1/spot"]);
    }

    #[test]
    fn without_on_demand_every_spot_offer_stays_cheapest_first_then_name_then_zone() {
        let types = [
            itype("b", &[("z2", "spot", 0.10), ("z1", "spot", 0.10)]),
            itype("a", &[("z1", "spot", 0.10), ("z1", "spot", 0.30)]),
        ];
        let mut all = offers(&types);
        assert_eq!(choose(&mut all), Some("spot"));
        assert_eq!(names(&all), ["a/z1/spot", "b/z1/spot", "b/z2/spot", "a/z1/spot"]);
        let mut none: Vec<(&Arc<InstanceType>, &Offering)> = Vec::new();
        assert_eq!(choose(&mut none), None);
    }

    #[test]
    fn reservation_labels_allow_only_offerings_of_a_matching_reservation() {
        let plain = Offering {
            zone: "z1".into(),
            capacity_type: "on-demand".into(),
            price: 0.1,
            available: true,
            reservation: None,
        };
        let reserved = Offering {
            capacity_type: "reserved".into(),
            reservation: Some(Arc::new(crate::OfferingReservation {
                id: "cr-1".into(),
                reservation_type: "capacity-block".into(),
                interruptible: false,
                remaining: 1,
            })),
            ..plain.clone()
        };
        let with = |key: &str, op: crate::Operator, values: &[&str]| {
            let mut r = Requirements::new();
            r.add(key, Requirement::new(op, values));
            r
        };
        let block = with(labels::CAPACITY_RESERVATION_TYPE, crate::Operator::In, &["capacity-block"]);
        assert!(offering_allowed(&block, &reserved));
        assert!(!offering_allowed(&block, &plain), "an offering that is not reserved has no reservation type");
        let other = with(labels::CAPACITY_RESERVATION_ID, crate::Operator::In, &["cr-2"]);
        assert!(!offering_allowed(&other, &reserved));
        let not_one = with(labels::CAPACITY_RESERVATION_ID, crate::Operator::NotIn, &["cr-1"]);
        assert!(offering_allowed(&not_one, &plain) && !offering_allowed(&not_one, &reserved));
    }

    #[test]
    fn a_type_is_priced_at_the_offer_its_launch_would_take() {
        let t = itype("a", &[("z1", "on-demand", 0.10), ("z2", "spot", 0.03), ("z1", "spot", 0.04)]);
        let any = Requirements::default();
        assert_eq!(type_price(&t, &any), Some(0.03));
        let mut z1 = Requirements::new();
        z1.add(labels::ZONE, Requirement::new(crate::Operator::In, &["z1"]));
        assert_eq!(type_price(&t, &z1), Some(0.04));
    }
}
