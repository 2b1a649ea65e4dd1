//! The scenario's custom instance types (`cloud.instanceTypes` as a list), built into instance
//! types with offerings, for exact tests that do not use the built-in catalog.

use std::sync::Arc;

use kerf_api::{InstanceType, Offering, labels};

use super::config::{InstanceTypesSource, SimConfig};

/// Custom types from the config: capacity, overhead and labels as given, offerings as given or
/// every zone × {spot, on-demand} (spot at 0.7 × the price unless named), labelled with the
/// cloud's region.
pub(super) fn build_custom(config: &SimConfig, zones: &[String]) -> Vec<Arc<InstanceType>> {
    let InstanceTypesSource::Custom(custom) = &config.instance_types else { return Vec::new() };
    let mut out: Vec<Arc<InstanceType>> = custom
        .iter()
        .map(|c| {
            let mut type_labels = c.labels.clone();
            type_labels.insert(labels::INSTANCE_TYPE.to_string(), c.name.clone());
            type_labels.entry(labels::ARCH.to_string()).or_insert_with(|| "amd64".to_string());
            type_labels.entry(labels::OS.to_string()).or_insert_with(|| "linux".to_string());
            // The cloud's region, whatever the scenario wrote: its instances carry it.
            type_labels.insert(labels::REGION.to_string(), config.region.clone());
            let base_price = c.price.unwrap_or(0.0);
            let default_price = |ct: &str| {
                if ct == labels::CAPACITY_TYPE_SPOT {
                    base_price * super::config::DEFAULT_CUSTOM_SPOT_FACTOR
                } else {
                    base_price
                }
            };
            let offerings = match &c.offerings {
                Some(list) => list
                    .iter()
                    .map(|o| Offering {
                        zone: o.zone.clone(),
                        capacity_type: o.capacity_type.clone(),
                        price: o.price.unwrap_or_else(|| default_price(&o.capacity_type)),
                        available: true,
                        reservation: None,
                    })
                    .collect(),
                None => zones
                    .iter()
                    .flat_map(|z| {
                        [labels::CAPACITY_TYPE_SPOT, labels::CAPACITY_TYPE_ON_DEMAND].map(|ct| Offering {
                            zone: z.clone(),
                            capacity_type: ct.to_string(),
                            price: default_price(ct),
                            available: true,
                            reservation: None,
                        })
                    })
                    .collect(),
            };
            Arc::new(InstanceType {
                name: c.name.clone(),
                labels: type_labels,
                capacity: c.capacity.clone(),
                overhead: c.overhead.clone(),
                offerings,
                price_estimated: false,
            })
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}
