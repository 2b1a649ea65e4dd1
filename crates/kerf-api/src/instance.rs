//! Instance types and their offerings, as the cloud provider describes them.

use std::collections::BTreeMap;

use crate::ResourceList;

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
}

/// One way to buy an instance type: a zone and a capacity type at a price.
#[derive(Debug, Clone, PartialEq)]
pub struct Offering {
    pub zone: String,
    /// `on-demand`, `spot` or `reserved`.
    pub capacity_type: String,
    /// Dollars per hour.
    pub price: f64,
    /// False when the provider knows it cannot launch it now (e.g. insufficient capacity).
    pub available: bool,
}

impl InstanceType {
    /// What pods can use: capacity less overhead, never below zero.
    pub fn allocatable(&self) -> ResourceList {
        let mut a = self.capacity.clone();
        for (k, v) in self.overhead.iter() {
            let cur = a.get(k);
            a.set(k.clone(), cur.saturating_sub(v).max(crate::Quantity::ZERO.with_format(cur.format())));
        }
        a
    }

    /// The cheapest available offering, if any.
    pub fn cheapest_available(&self) -> Option<&Offering> {
        self.offerings
            .iter()
            .filter(|o| o.available)
            .min_by(|a, b| a.price.total_cmp(&b.price).then_with(|| a.zone.cmp(&b.zone)))
    }
}
