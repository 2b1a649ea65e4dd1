//! The scenario file's `cloud:` section: which region and zones the simulated cloud has, which
//! instance types it sells, how long launches take, which offerings are out of capacity, and its
//! capacity reservations.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use kerf_api::labels;
use kerf_api::{GoDuration, ResourceList};
use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::{Deserialize, Serialize, Serializer};

/// Spot price of a custom type when its offering names none: this share of the on-demand price.
pub const DEFAULT_CUSTOM_SPOT_FACTOR: f64 = 0.7;

/// The simulated cloud, as the scenario file's `cloud:` section describes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SimConfig {
    /// Default `us-west-2`.
    #[serde(default = "default_region")]
    pub region: String,
    /// Zones the cloud offers. Default (`None`): every zone the catalog knows for the region.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zones: Option<Vec<String>>,
    /// `aws` (the built-in catalog, default) or a list of custom instance types.
    #[serde(default)]
    pub instance_types: InstanceTypesSource,
    /// From instance creation to the Node being registered and Ready. Default 30s.
    #[serde(default = "default_launch_latency")]
    pub launch_latency: GoDuration,
    /// Offerings that fail to launch with insufficient capacity.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unavailable: Vec<UnavailableOffering>,
    /// On-demand capacity reservations and capacity blocks in the account.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capacity_reservations: Vec<super::reservations::CapacityReservation>,
}

fn default_region() -> String {
    "us-west-2".to_string()
}

fn default_launch_latency() -> GoDuration {
    GoDuration::from_secs(30)
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            region: default_region(),
            zones: None,
            instance_types: InstanceTypesSource::Aws,
            launch_latency: default_launch_latency(),
            unavailable: Vec::new(),
            capacity_reservations: Vec::new(),
        }
    }
}

/// Where the simulated cloud's instance types come from.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum InstanceTypesSource {
    /// The built-in AWS catalog for the region (written `aws`).
    #[default]
    Aws,
    /// Exactly these types (written as a list).
    Custom(Vec<CustomInstanceType>),
}

impl Serialize for InstanceTypesSource {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            InstanceTypesSource::Aws => serializer.serialize_str("aws"),
            InstanceTypesSource::Custom(types) => types.serialize(serializer),
        }
    }
}

impl<'de> Deserialize<'de> for InstanceTypesSource {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct SourceVisitor;
        impl<'de> Visitor<'de> for SourceVisitor {
            type Value = InstanceTypesSource;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("\"aws\" or a list of instance types")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                if v == "aws" {
                    Ok(InstanceTypesSource::Aws)
                } else {
                    Err(E::custom(format!("instanceTypes: {v:?} is not \"aws\" or a list of instance types")))
                }
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut types = Vec::new();
                while let Some(t) = seq.next_element::<CustomInstanceType>()? {
                    types.push(t);
                }
                Ok(InstanceTypesSource::Custom(types))
            }
        }
        deserializer.deserialize_any(SourceVisitor)
    }
}

/// An instance type defined in the scenario (for exact tests).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CustomInstanceType {
    pub name: String,
    /// What the machine has. Allocatable is `capacity - overhead`.
    pub capacity: ResourceList,
    #[serde(default, skip_serializing_if = "ResourceList::is_empty")]
    pub overhead: ResourceList,
    /// Extra labels of the type (arch, os and instance type are filled in when absent).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// On-demand $/h. Required unless every offering names its price.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price: Option<f64>,
    /// Default: every zone × {on-demand, spot}.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offerings: Option<Vec<CustomOffering>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CustomOffering {
    pub zone: String,
    /// `on-demand`, `spot` or `reserved`.
    pub capacity_type: String,
    /// $/h; default the type's price (on-demand, reserved) or 0.7 × it (spot).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price: Option<f64>,
}

/// An offering that fails with insufficient capacity whenever it is tried. A missing zone or
/// capacity type means every zone / capacity type.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UnavailableOffering {
    pub instance_type: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_type: Option<String>,
}

impl UnavailableOffering {
    pub fn covers(&self, instance_type: &str, zone: &str, capacity_type: &str) -> bool {
        self.instance_type == instance_type
            && self.zone.as_deref().is_none_or(|z| z == zone)
            && self.capacity_type.as_deref().is_none_or(|c| c == capacity_type)
    }
}

/// A `cloud:` section that parses but does not make sense.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cloud.{field}: {problem}")]
pub struct SimConfigError {
    /// The field path below `cloud`, e.g. `instanceTypes[2].offerings[0].capacityType`.
    pub field: String,
    pub problem: String,
}

impl SimConfigError {
    pub fn new(field: impl Into<String>, problem: impl Into<String>) -> Self {
        SimConfigError { field: field.into(), problem: problem.into() }
    }
}

pub(crate) const CAPACITY_TYPES: [&str; 3] =
    [labels::CAPACITY_TYPE_ON_DEMAND, labels::CAPACITY_TYPE_SPOT, labels::CAPACITY_TYPE_RESERVED];

fn check_price(field: String, price: f64) -> Result<(), SimConfigError> {
    if !price.is_finite() || price < 0.0 {
        return Err(SimConfigError::new(field, format!("price {price} must be a non-negative number")));
    }
    Ok(())
}

impl SimConfig {
    /// Checks everything that does not need the catalog: custom types, offerings, the
    /// unavailable list's capacity types, and that `zones` belong to the region.
    pub fn validate(&self) -> Result<(), SimConfigError> {
        if self.region.is_empty() {
            return Err(SimConfigError::new("region", "must not be empty"));
        }
        if let Some(zones) = &self.zones {
            if zones.is_empty() {
                return Err(SimConfigError::new("zones", "must list at least one zone (or be omitted)"));
            }
            let mut seen = BTreeSet::new();
            for (i, z) in zones.iter().enumerate() {
                if !z.starts_with(&self.region) || z.len() <= self.region.len() {
                    return Err(SimConfigError::new(
                        format!("zones[{i}]"),
                        format!("zone {z:?} is not in region {}", self.region),
                    ));
                }
                if !seen.insert(z) {
                    return Err(SimConfigError::new(format!("zones[{i}]"), format!("zone {z:?} is listed twice")));
                }
            }
        }
        if let InstanceTypesSource::Custom(types) = &self.instance_types {
            if types.is_empty() {
                return Err(SimConfigError::new(
                    "instanceTypes",
                    "must list at least one instance type (or be \"aws\")",
                ));
            }
            let mut names = BTreeSet::new();
            for (i, t) in types.iter().enumerate() {
                let at = |f: &str| format!("instanceTypes[{i}].{f}");
                if t.name.is_empty() {
                    return Err(SimConfigError::new(at("name"), "must not be empty"));
                }
                if !names.insert(t.name.as_str()) {
                    return Err(SimConfigError::new(
                        at("name"),
                        format!("instance type {:?} is defined twice", t.name),
                    ));
                }
                for (k, q) in t.capacity.iter().chain(t.overhead.iter()) {
                    if q.is_negative() {
                        return Err(SimConfigError::new(at("capacity"), format!("{k} must not be negative")));
                    }
                }
                if let Some(p) = t.price {
                    check_price(at("price"), p)?;
                }
                match &t.offerings {
                    None if t.price.is_none() => {
                        return Err(SimConfigError::new(
                            at("price"),
                            format!("instance type {:?} needs a price (or offerings that each name one)", t.name),
                        ));
                    }
                    None => {}
                    Some(offerings) => {
                        if offerings.is_empty() {
                            return Err(SimConfigError::new(at("offerings"), "must list at least one offering"));
                        }
                        for (j, o) in offerings.iter().enumerate() {
                            let at = |f: &str| format!("instanceTypes[{i}].offerings[{j}].{f}");
                            if !CAPACITY_TYPES.contains(&o.capacity_type.as_str()) {
                                return Err(SimConfigError::new(
                                    at("capacityType"),
                                    format!("{:?} is not one of on-demand, spot, reserved", o.capacity_type),
                                ));
                            }
                            if let Some(zones) = &self.zones
                                && !zones.contains(&o.zone)
                            {
                                return Err(SimConfigError::new(
                                    at("zone"),
                                    format!("zone {:?} is not one of cloud.zones {:?}", o.zone, zones),
                                ));
                            }
                            match o.price {
                                Some(p) => check_price(at("price"), p)?,
                                None if t.price.is_none() => {
                                    return Err(SimConfigError::new(
                                        at("price"),
                                        format!("needed because instance type {:?} has no price", t.name),
                                    ));
                                }
                                None => {}
                            }
                        }
                    }
                }
            }
        }
        for (i, u) in self.unavailable.iter().enumerate() {
            if u.instance_type.is_empty() {
                return Err(SimConfigError::new(format!("unavailable[{i}].instanceType"), "must not be empty"));
            }
            if let Some(c) = &u.capacity_type
                && !CAPACITY_TYPES.contains(&c.as_str())
            {
                return Err(SimConfigError::new(
                    format!("unavailable[{i}].capacityType"),
                    format!("{c:?} is not one of on-demand, spot, reserved"),
                ));
            }
        }
        super::reservations::validate(&self.capacity_reservations)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> Result<SimConfig, String> {
        serde_yaml_ng::from_str::<SimConfig>(yaml).map_err(|e| e.to_string())
    }

    #[test]
    fn empty_section_takes_the_documented_defaults() {
        let c = parse("{}").unwrap();
        assert_eq!(c.region, "us-west-2");
        assert_eq!(c.zones, None);
        assert_eq!(c.instance_types, InstanceTypesSource::Aws);
        assert_eq!(c.launch_latency, GoDuration::from_secs(30));
        assert!(c.unavailable.is_empty());
        c.validate().unwrap();
    }

    #[test]
    fn contract_example_parses() {
        let c = parse(
            "region: us-west-2\nzones: [us-west-2a, us-west-2b, us-west-2c]\ninstanceTypes: aws\nlaunchLatency: 45s\n\
             unavailable:\n  - {instanceType: m5.large, zone: us-west-2a, capacityType: spot}\n",
        )
        .unwrap();
        assert_eq!(c.zones.as_ref().map(Vec::len), Some(3));
        assert_eq!(c.launch_latency, GoDuration::from_secs(45));
        assert!(c.unavailable[0].covers("m5.large", "us-west-2a", "spot"));
        assert!(!c.unavailable[0].covers("m5.large", "us-west-2b", "spot"));
        c.validate().unwrap();
    }

    #[test]
    fn custom_instance_types_parse_with_offerings() {
        let c = parse(
            "instanceTypes:\n  - name: small\n    capacity: {cpu: \"2\", memory: 4Gi, pods: \"20\"}\n    \
             overhead: {cpu: 100m, memory: 200Mi}\n    labels: {kubernetes.io/arch: amd64}\n    price: 0.10\n    \
             offerings:\n      - {zone: us-west-2a, capacityType: spot, price: 0.05}\n",
        )
        .unwrap();
        let InstanceTypesSource::Custom(types) = &c.instance_types else { panic!("expected custom types") };
        assert_eq!(types[0].name, "small");
        assert_eq!(types[0].capacity.get("memory").canonical(), "4Gi");
        assert_eq!(types[0].offerings.as_ref().unwrap()[0].price, Some(0.05));
        c.validate().unwrap();
    }

    #[test]
    fn unknown_field_is_an_error_naming_it() {
        let err = parse("regoin: us-east-1").unwrap_err();
        assert!(err.contains("unknown field `regoin`"), "{err}");
        let err = parse("instanceTypes:\n  - {name: a, capacity: {cpu: '1'}, price: 1, colour: red}").unwrap_err();
        assert!(err.contains("unknown field `colour`"), "{err}");
    }

    #[test]
    fn instance_types_must_be_aws_or_a_list() {
        let err = parse("instanceTypes: gcp").unwrap_err();
        assert!(err.contains("instanceTypes: \"gcp\" is not \"aws\""), "{err}");
    }

    #[test]
    fn validation_names_the_field_and_problem() {
        let c = parse("instanceTypes:\n  - {name: a, capacity: {cpu: '1'}}").unwrap();
        assert_eq!(
            c.validate().unwrap_err().to_string(),
            "cloud.instanceTypes[0].price: instance type \"a\" needs a price (or offerings that each name one)"
        );
        let c = parse(
            "instanceTypes:\n  - {name: a, capacity: {cpu: '1'}, price: 1, offerings: [{zone: us-west-2a, capacityType: cheap}]}",
        )
        .unwrap();
        assert_eq!(
            c.validate().unwrap_err().to_string(),
            "cloud.instanceTypes[0].offerings[0].capacityType: \"cheap\" is not one of on-demand, spot, reserved"
        );
        let c = parse("zones: [us-east-1a]").unwrap();
        assert_eq!(
            c.validate().unwrap_err().to_string(),
            "cloud.zones[0]: zone \"us-east-1a\" is not in region us-west-2"
        );
        let c = parse("unavailable: [{instanceType: m5.large, capacityType: Spot}]").unwrap();
        assert_eq!(
            c.validate().unwrap_err().to_string(),
            "cloud.unavailable[0].capacityType: \"Spot\" is not one of on-demand, spot, reserved"
        );
    }
}
