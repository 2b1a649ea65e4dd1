//! Instance types: the region's types from DescribeInstanceTypes and where they are sold from
//! DescribeInstanceTypeOfferings, turned into kerf's `InstanceType`s with Karpenter's capacity
//! and overhead (the built-in catalog's arithmetic), on-demand prices from the Price List API
//! ([`crate::pricing`]) where it priced the type, else from the built-in table, spot prices
//! from DescribeSpotPriceHistory. When EC2 cannot be asked, the built-in catalog
//! stands in for all of it.

use std::collections::BTreeMap;

use aws_sdk_ec2::types::{ArchitectureType, LocationType, UsageClassType};
use kerf_api::labels;
use kerf_api::{InstanceType, Offering};
use kerf_cloud::aws::allocatable::{self, NodeClassSettings};
use kerf_cloud::aws::catalog::{GpuInfo, TypeInfo, catalog, type_labels};

use crate::AwsClients;
use crate::error::AwsError;
use crate::pricing::OnDemandPrices;

/// Where the instance type facts came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// DescribeInstanceTypes and DescribeInstanceTypeOfferings.
    Ec2,
    /// The built-in catalog (EC2 was not reachable).
    Catalog,
}

/// A region's instance types and the zones each is sold in.
#[derive(Debug, Clone, PartialEq)]
pub struct TypeTable {
    pub source: Source,
    pub types: BTreeMap<String, (TypeInfo, Vec<String>)>,
}

fn lower(s: &str) -> String {
    s.to_ascii_lowercase()
}

fn type_info(t: &aws_sdk_ec2::types::InstanceTypeInfo) -> Option<TypeInfo> {
    let name = t.instance_type()?.as_str().to_string();
    let archs = t.processor_info().map(|p| p.supported_architectures()).unwrap_or_default();
    let arch = if archs.contains(&ArchitectureType::X8664) {
        "amd64"
    } else if archs.contains(&ArchitectureType::Arm64) {
        "arm64"
    } else {
        return None;
    };
    let network = t.network_info();
    let known = catalog().ok().and_then(|c| c.type_info(&name));
    let gpu = t.gpu_info().and_then(|g| g.gpus().first()).map(|g| GpuInfo {
        name: lower(g.name().unwrap_or_default()),
        manufacturer: lower(g.manufacturer().unwrap_or_default()),
        count: i64::from(g.count().unwrap_or(0)),
        memory_mib: i64::from(g.memory_info().and_then(|m| m.size_in_mib()).unwrap_or(0)),
    });
    let info = TypeInfo {
        name,
        arch: arch.to_string(),
        vcpu: i64::from(t.v_cpu_info().and_then(|v| v.default_v_cpus()).unwrap_or(0)),
        memory_mib: t.memory_info().and_then(|m| m.size_in_mib()).unwrap_or(0),
        enis: i64::from(network.and_then(|n| n.maximum_network_interfaces()).unwrap_or(0)),
        ipv4_per_eni: i64::from(network.and_then(|n| n.ipv4_addresses_per_interface()).unwrap_or(0)),
        hypervisor: t.hypervisor().map(|h| h.as_str().to_string()).unwrap_or_default(),
        bare_metal: t.bare_metal().unwrap_or(false),
        cpu_manufacturer: known.map(|k| k.cpu_manufacturer.clone()).unwrap_or_default(),
        encryption_in_transit: network.and_then(|n| n.encryption_in_transit_supported()).unwrap_or(false),
        spot: t.supported_usage_classes().contains(&UsageClassType::Spot),
        // Facts EC2 reports in shapes kerf does not read yet come from the built-in catalog.
        network_bandwidth_mbps: known.and_then(|k| k.network_bandwidth_mbps),
        ebs_bandwidth_mbps: known.and_then(|k| k.ebs_bandwidth_mbps),
        clock_mhz: known.and_then(|k| k.clock_mhz),
        gpu: gpu.filter(|g| g.count > 0),
        neuron: known.and_then(|k| k.neuron.clone()),
        local_nvme_gb: known.and_then(|k| k.local_nvme_gb),
        efa: known.and_then(|k| k.efa),
        max_ebs_attachments: known.and_then(|k| k.max_ebs_attachments),
        offers: BTreeMap::new(),
        price_estimated: BTreeMap::new(),
    };
    (info.vcpu > 0 && info.memory_mib > 0 && info.enis > 0 && info.ipv4_per_eni > 0).then_some(info)
}

/// The region's types and zones from EC2.
pub async fn describe(clients: &AwsClients) -> Result<TypeTable, AwsError> {
    let mut infos = BTreeMap::new();
    let mut token = None;
    loop {
        let page = clients
            .ec2
            .describe_instance_types()
            .max_results(100)
            .set_next_token(token)
            .send()
            .await
            .map_err(|e| AwsError::from_sdk("ec2:DescribeInstanceTypes", e))?;
        for t in page.instance_types() {
            if let Some(info) = type_info(t) {
                infos.insert(info.name.clone(), info);
            }
        }
        token = page.next_token().map(str::to_string);
        if token.is_none() {
            break;
        }
    }
    let mut zones: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut token = None;
    loop {
        let page = clients
            .ec2
            .describe_instance_type_offerings()
            .location_type(LocationType::AvailabilityZone)
            .set_next_token(token)
            .send()
            .await
            .map_err(|e| AwsError::from_sdk("ec2:DescribeInstanceTypeOfferings", e))?;
        for o in page.instance_type_offerings() {
            if let (Some(t), Some(z)) = (o.instance_type(), o.location()) {
                zones.entry(t.as_str().to_string()).or_default().push(z.to_string());
            }
        }
        token = page.next_token().map(str::to_string);
        if token.is_none() {
            break;
        }
    }
    let mut types = BTreeMap::new();
    for (name, info) in infos {
        if let Some(mut z) = zones.remove(&name) {
            z.sort();
            z.dedup();
            types.insert(name, (info, z));
        }
    }
    Ok(TypeTable { source: Source::Ec2, types })
}

/// The region's types and zones from the built-in catalog.
pub fn from_catalog(region: &str) -> Result<TypeTable, String> {
    let cat = catalog().map_err(|e| e.to_string())?;
    let mut types = BTreeMap::new();
    for offer in cat.offers(region).map_err(|e| e.to_string())? {
        if let Some(info) = cat.type_info(&offer.instance_type) {
            types.insert(offer.instance_type.clone(), (info.clone(), offer.zones.clone()));
        }
    }
    Ok(TypeTable { source: Source::Catalog, types })
}

/// On-demand $/h of a type in a region from the built-in table (`None`: unknown price).
pub fn on_demand_price(region: &str, instance_type: &str) -> Option<f64> {
    table_price(region, instance_type).map(|(price, _)| price)
}

/// The built-in table's on-demand $/h of a type in a region and whether it is an estimate.
fn table_price(region: &str, instance_type: &str) -> Option<(f64, bool)> {
    catalog().ok()?.offer(region, instance_type).map(|o| (o.price, o.estimate.is_some()))
}

/// Latest spot price per (instance type, zone).
pub type SpotPrices = BTreeMap<(String, String), f64>;

/// The current spot prices of Linux instances in the region.
pub async fn spot_prices(clients: &AwsClients) -> Result<SpotPrices, AwsError> {
    let mut latest: BTreeMap<(String, String), (i64, f64)> = BTreeMap::new();
    let mut token = None;
    loop {
        let page = clients
            .ec2
            .describe_spot_price_history()
            .product_descriptions("Linux/UNIX")
            .product_descriptions("Linux/UNIX (Amazon VPC)")
            .set_next_token(token)
            .send()
            .await
            .map_err(|e| AwsError::from_sdk("ec2:DescribeSpotPriceHistory", e))?;
        for p in page.spot_price_history() {
            let (Some(t), Some(z), Some(price)) = (p.instance_type(), p.availability_zone(), p.spot_price()) else {
                continue;
            };
            let Ok(price) = price.parse::<f64>() else { continue };
            if !(price.is_finite() && price > 0.0) {
                continue;
            }
            let at = p.timestamp().map(|t| t.secs()).unwrap_or(0);
            let key = (t.as_str().to_string(), z.to_string());
            match latest.get(&key) {
                Some((seen, _)) if *seen > at => {}
                _ => {
                    latest.insert(key, (at, price));
                }
            }
        }
        token = page.next_token().map(str::to_string).filter(|t| !t.is_empty());
        if token.is_none() {
            break;
        }
    }
    Ok(latest.into_iter().map(|(k, (_, p))| (k, p)).collect())
}

/// Builds the instance types of `table` sold in `zones` with the node class `settings`:
/// on-demand offerings where the type has a known price (`on_demand`, from the Price List API,
/// else the built-in table), spot offerings where EC2 sells it as
/// spot and a spot price is known (from `spot`, else, for the built-in catalog, its model).
pub fn build(
    table: &TypeTable,
    region: &str,
    zones: &[String],
    settings: &NodeClassSettings,
    spot: &SpotPrices,
    on_demand: &OnDemandPrices,
) -> Result<Vec<InstanceType>, String> {
    let mut out = Vec::new();
    // A Windows class boots amd64 types only, at the Linux price plus the licence fee (an
    // estimate, as the built-in catalog's Windows prices are).
    let windows_build = kerf_cloud::aws::windows::windows_build(settings.ami_family);
    for (name, (info, type_zones)) in &table.types {
        if windows_build.is_some() && info.arch != "amd64" {
            continue;
        }
        let os_price = |linux: f64| match windows_build {
            Some(_) => kerf_cloud::aws::windows::windows_price(info, linux),
            None => linux,
        };
        // A price from the Price List API is listed; the table's may be an estimate.
        let Some((od_price, price_estimated)) =
            on_demand.get(name).map(|p| (*p, false)).or_else(|| table_price(region, name))
        else {
            continue;
        };
        let mut offerings = Vec::new();
        for zone in type_zones.iter().filter(|z| zones.contains(z)) {
            if info.spot {
                let price = match table.source {
                    Source::Ec2 => spot.get(&(name.clone(), zone.clone())).copied(),
                    Source::Catalog => Some(kerf_cloud::aws::spot_price(name, zone, od_price)),
                };
                if let Some(price) = price {
                    offerings.push(Offering {
                        zone: zone.clone(),
                        capacity_type: labels::CAPACITY_TYPE_SPOT.to_string(),
                        price: os_price(price),
                        available: true,
                        reservation: None,
                    });
                }
            }
            offerings.push(Offering {
                zone: zone.clone(),
                capacity_type: labels::CAPACITY_TYPE_ON_DEMAND.to_string(),
                price: os_price(od_price),
                available: true,
                reservation: None,
            });
        }
        if offerings.is_empty() {
            continue;
        }
        let capacity = allocatable::capacity(info, settings);
        let overhead = allocatable::overhead(&capacity, settings).map_err(|e| e.to_string())?;
        let mut type_labels = type_labels(info);
        type_labels.insert(labels::REGION.to_string(), region.to_string());
        if let Some(build) = windows_build {
            type_labels.insert(labels::OS.to_string(), "windows".to_string());
            type_labels.insert(labels::WINDOWS_BUILD.to_string(), build.to_string());
        }
        out.push(InstanceType {
            name: name.clone(),
            labels: type_labels,
            capacity,
            overhead,
            offerings,
            price_estimated: price_estimated || windows_build.is_some(),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn on_demand_of(types: &[InstanceType], name: &str) -> Option<f64> {
        let t = types.iter().find(|t| t.name == name)?;
        t.offerings.iter().find(|o| o.capacity_type == labels::CAPACITY_TYPE_ON_DEMAND).map(|o| o.price)
    }

    #[test]
    fn on_demand_prices_from_the_price_list_api_win_and_the_table_prices_the_rest() {
        let table = from_catalog("us-west-2").unwrap_or_else(|e| panic!("{e}"));
        let zones = vec!["us-west-2a".to_string()];
        let settings = NodeClassSettings::default();
        let api = OnDemandPrices::from([("m5.large".to_string(), 0.5)]);
        let types =
            build(&table, "us-west-2", &zones, &settings, &SpotPrices::new(), &api).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(on_demand_of(&types, "m5.large"), Some(0.5));
        let c5 = on_demand_price("us-west-2", "c5.large");
        assert!(c5.is_some());
        assert_eq!(on_demand_of(&types, "c5.large"), c5, "a type the API did not price keeps the table's price");
    }

    #[test]
    fn a_windows_class_offers_amd64_types_labelled_windows_at_the_licensed_price() {
        let table = from_catalog("us-west-2").unwrap_or_else(|e| panic!("{e}"));
        let zones = vec!["us-west-2a".to_string()];
        let api = OnDemandPrices::from([("m5.large".to_string(), 0.096)]);
        let windows = NodeClassSettings {
            ami_family: Some(kerf_api::ec2nodeclass::AmiFamily::Windows2022),
            ..NodeClassSettings::default()
        };
        let types =
            build(&table, "us-west-2", &zones, &windows, &SpotPrices::new(), &api).unwrap_or_else(|e| panic!("{e}"));
        assert!(types.iter().all(|t| t.labels.get(labels::ARCH).map(String::as_str) == Some("amd64")));
        let m5 = types.iter().find(|t| t.name == "m5.large").unwrap_or_else(|| panic!("no m5.large"));
        assert_eq!(m5.labels.get(labels::OS).map(String::as_str), Some("windows"));
        assert_eq!(m5.labels.get(labels::WINDOWS_BUILD).map(String::as_str), Some("10.0.20348"));
        // m5.large: 2 vCPUs at the per-vCPU licence fee on top of the Linux price.
        assert_eq!(on_demand_of(&types, "m5.large"), Some(0.188));
        assert!(m5.price_estimated);
    }

    #[test]
    fn a_table_estimate_is_marked_and_a_price_list_api_price_is_not() {
        let table = from_catalog("us-west-2").unwrap_or_else(|e| panic!("{e}"));
        let zones = vec!["us-west-2a".to_string()];
        let settings = NodeClassSettings::default();
        // The table estimates both types' prices in us-west-2; the API prices one of them.
        let api = OnDemandPrices::from([("r5.large".to_string(), 0.126)]);
        let types =
            build(&table, "us-west-2", &zones, &settings, &SpotPrices::new(), &api).unwrap_or_else(|e| panic!("{e}"));
        let estimated = |name: &str| types.iter().find(|t| t.name == name).map(|t| t.price_estimated);
        assert_eq!(estimated("t3.large"), Some(true));
        assert_eq!(estimated("r5.large"), Some(false));
    }
}
