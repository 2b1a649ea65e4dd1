//! Instance types and their offerings, as the cloud provider describes them.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::{ResourceList, labels};

/// A launchable machine shape.
#[derive(Debug, Clone, PartialEq)]
pub struct InstanceType {
    /// e.g. `c7i.2xlarge`.
    pub name: String,
    /// The type's own single-valued labels: `node.kubernetes.io/instance-type`,
    /// `kubernetes.io/arch`, `kubernetes.io/os`, `topology.kubernetes.io/region`,
    /// `karpenter.k8s.aws/instance-*`, ... Zone and capacity type are not here: they come from
    /// the offerings.
    pub labels: BTreeMap<String, String>,
    /// What the machine has (`cpu`, `memory`, `pods`, `ephemeral-storage`, GPUs, ...).
    pub capacity: ResourceList,
    /// What the system takes off the top: kube-reserved + system-reserved + eviction threshold.
    /// Allocatable is `capacity - overhead`.
    pub overhead: ResourceList,
    /// Where and how the type can be bought.
    pub offerings: Vec<Offering>,
    /// The on-demand price is an estimate (the built-in catalog's rules, data/README.md), not a
    /// listed price; spot prices modelled from it are estimates too.
    pub price_estimated: bool,
}

/// One way to buy an instance type: a zone and a capacity type at a price.
#[derive(Debug, Clone, PartialEq)]
pub struct Offering {
    pub zone: String,
    /// `on-demand`, `spot` or `reserved`.
    pub capacity_type: String,
    /// Dollars per hour.
    pub price: f64,
    /// False when the provider knows it cannot launch it now (e.g. insufficient capacity, a
    /// capacity reservation with no instance left).
    pub available: bool,
    /// The capacity reservation a `reserved` offering launches into; `None` for every other
    /// offering.
    pub reservation: Option<Arc<OfferingReservation>>,
}

/// The capacity reservation behind a `reserved` offering: one offering per (instance type,
/// zone, reservation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OfferingReservation {
    /// `cr-0a1b2c3d4e5f60001`: the node's `karpenter.k8s.aws/capacity-reservation-id`.
    pub id: String,
    /// `default` or `capacity-block`: the node's `karpenter.k8s.aws/capacity-reservation-type`.
    pub reservation_type: String,
    /// Instances it can still take.
    pub remaining: u32,
    /// Its owner may reclaim it (an interruptible reservation): the node's
    /// `karpenter.k8s.aws/capacity-reservation-interruptible`.
    pub interruptible: bool,
}

impl Offering {
    /// The value of an offering-level label (zone, capacity type, the reservation's id, type
    /// and whether it is interruptible) this offering gives its node; `None` for a label it does not set (the reservation
    /// labels of an offering that is not reserved) and for keys that are not offering-level.
    pub fn label(&self, key: &str) -> Option<&str> {
        match key {
            labels::ZONE => Some(&self.zone),
            labels::CAPACITY_TYPE => Some(&self.capacity_type),
            labels::CAPACITY_RESERVATION_ID => self.reservation.as_ref().map(|r| r.id.as_str()),
            labels::CAPACITY_RESERVATION_TYPE => self.reservation.as_ref().map(|r| r.reservation_type.as_str()),
            labels::CAPACITY_RESERVATION_INTERRUPTIBLE => {
                self.reservation.as_ref().map(|r| if r.interruptible { "true" } else { "false" })
            }
            _ => None,
        }
    }
}

/// Whether a label is an offering's rather than its instance type's: zone, capacity type and
/// the capacity reservation labels.
pub fn is_offering_label(key: &str) -> bool {
    matches!(key, labels::ZONE | labels::CAPACITY_TYPE) || labels::CAPACITY_RESERVATION_LABELS.contains(&key)
}

impl InstanceType {
    /// What pods can use: capacity less overhead, never below zero.
    pub fn allocatable(&self) -> ResourceList {
        let mut a = self.capacity.clone();
        for k in self.overhead.0.keys() {
            a.set(k.clone(), self.allocatable_of(k));
        }
        a
    }

    /// What pods can use of one resource (see [`InstanceType::allocatable`]).
    pub fn allocatable_of(&self, name: &str) -> crate::Quantity {
        let cur = self.capacity.get(name);
        match self.overhead.0.get(name) {
            Some(v) => cur.saturating_sub(v).max(crate::Quantity::ZERO.with_format(cur.format())),
            None => cur,
        }
    }

    /// Whether `requests` fit in what pods can use (`requests.fits(&self.allocatable())`,
    /// without building the list).
    pub fn fits(&self, requests: &ResourceList) -> bool {
        requests.0.iter().all(|(k, req)| req.is_zero() || *req <= self.allocatable_of(k))
    }

    /// The cheapest available offering, if any.
    pub fn cheapest_available(&self) -> Option<&Offering> {
        self.offerings
            .iter()
            .filter(|o| o.available)
            .min_by(|a, b| a.price.total_cmp(&b.price).then_with(|| a.zone.cmp(&b.zone)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_fit_a_type_exactly_when_they_fit_its_allocatable_list() {
        let list = |entries: &[(&str, &str)]| {
            ResourceList(entries.iter().map(|(k, v)| (k.to_string(), v.parse().unwrap())).collect())
        };
        let t = InstanceType {
            name: "m5.large".to_string(),
            labels: BTreeMap::new(),
            capacity: list(&[("cpu", "2"), ("memory", "8Gi"), ("pods", "29")]),
            // An overhead on a resource the type does not have leaves none of it, never less.
            overhead: list(&[("cpu", "80m"), ("memory", "1Gi"), ("hugepages-2Mi", "1Mi")]),
            offerings: Vec::new(),
            price_estimated: false,
        };
        for requests in [
            list(&[("cpu", "1920m")]),
            list(&[("cpu", "1921m")]),
            list(&[("memory", "7Gi"), ("pods", "29")]),
            list(&[("memory", "7169Mi")]),
            list(&[("hugepages-2Mi", "1Mi")]),
            list(&[("nvidia.com/gpu", "0")]),
            list(&[("nvidia.com/gpu", "1")]),
        ] {
            assert_eq!(t.fits(&requests), requests.fits(&t.allocatable()), "{requests}");
        }
        assert!(t.fits(&list(&[("cpu", "1920m"), ("memory", "7Gi")])));
        assert!(!t.fits(&list(&[("cpu", "1921m")])));
    }
}
