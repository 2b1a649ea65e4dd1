//! CreateFleet (`instant`, one instance): overrides over instance type × subnet (zone), on-demand
//! `lowest-price` (`prioritized`, in the caller's order, when NodeOverlays set the prices kerf
//! ranks by: EC2 would rank by its list prices), spot `price-capacity-optimized`, the instance and
//! its volumes tagged. A reserved launch is an on-demand one (a capacity block's:
//! `capacity-block`) whose launch templates target the reservations. Errors that mean "no
//! capacity for this offering" are reported per offering so that the caller can mark them
//! unavailable and try the next ones.

use std::collections::BTreeMap;

use crate::AwsClients;
use crate::error::{AwsError, is_insufficient_capacity};
use crate::tags::ec2_tags;
use aws_sdk_ec2::types::{
    DefaultTargetCapacityType, FleetLaunchTemplateConfigRequest, FleetLaunchTemplateOverridesRequest,
    FleetLaunchTemplateSpecificationRequest, FleetOnDemandAllocationStrategy, FleetType, InstanceType,
    OnDemandOptionsRequest, ResourceType, SpotAllocationStrategy, SpotOptionsRequest, TagSpecification,
    TargetCapacitySpecificationRequest,
};

/// Karpenter sends at most this many instance types to one CreateFleet.
pub const MAX_INSTANCE_TYPES: usize = 60;

/// One offering CreateFleet may launch: an instance type in a subnet, from a launch template.
#[derive(Debug, Clone, PartialEq)]
pub struct Override {
    pub instance_type: String,
    pub zone: String,
    pub subnet_id: String,
    pub launch_template: String,
    pub price: f64,
}

/// How one CreateFleet call buys its instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purchase {
    Spot,
    /// On-demand, EC2 choosing the override with the lowest list price.
    OnDemand,
    /// On-demand, EC2 taking the overrides in the order given (priority 0 first).
    OnDemandPrioritized,
    /// Into the capacity reservations the launch templates target; `capacity_block` when they
    /// are capacity blocks.
    Reserved {
        capacity_block: bool,
    },
}

/// The instance CreateFleet launched.
#[derive(Debug, Clone, PartialEq)]
pub struct Launched {
    pub instance_id: String,
    pub instance_type: String,
    pub zone: String,
}

/// What one CreateFleet call did.
#[derive(Debug, Clone, PartialEq)]
pub enum FleetResult {
    Launched(Launched),
    /// Nothing launched. `unavailable` are the (instance type, zone) offerings EC2 had no capacity
    /// for; `errors` the other errors it reported, as `code: message`.
    NotLaunched {
        unavailable: Vec<(String, String)>,
        errors: Vec<String>,
    },
}

/// Launches one instance bought as `purchase` from `overrides` (cheapest first; grouped per
/// launch template in order of first appearance), tagging instance, volumes and the fleet
/// request.
pub async fn create_fleet(
    clients: &AwsClients,
    purchase: Purchase,
    overrides: &[Override],
    tags: &BTreeMap<String, String>,
) -> Result<FleetResult, AwsError> {
    let spot = purchase == Purchase::Spot;
    let prioritized = matches!(purchase, Purchase::OnDemandPrioritized | Purchase::Reserved { .. });
    let mut configs: Vec<(String, Vec<FleetLaunchTemplateOverridesRequest>)> = Vec::new();
    for (i, o) in overrides.iter().enumerate() {
        let mut request = FleetLaunchTemplateOverridesRequest::builder()
            .instance_type(InstanceType::from(o.instance_type.as_str()))
            .subnet_id(&o.subnet_id)
            .availability_zone(&o.zone);
        if prioritized {
            request = request.priority(i as f64);
        }
        let request = request.build();
        match configs.iter_mut().find(|(lt, _)| *lt == o.launch_template) {
            Some((_, list)) => list.push(request),
            None => configs.push((o.launch_template.clone(), vec![request])),
        }
    }
    let target = TargetCapacitySpecificationRequest::builder()
        .total_target_capacity(1)
        .default_target_capacity_type(match purchase {
            Purchase::Spot => DefaultTargetCapacityType::Spot,
            Purchase::Reserved { capacity_block: true } => DefaultTargetCapacityType::CapacityBlock,
            _ => DefaultTargetCapacityType::OnDemand,
        })
        .build();
    let ec2_tag_list = ec2_tags(tags);
    let tag_spec =
        |r: ResourceType| TagSpecification::builder().resource_type(r).set_tags(Some(ec2_tag_list.clone())).build();
    let mut request = clients
        .ec2
        .create_fleet()
        .r#type(FleetType::Instant)
        .target_capacity_specification(target)
        .tag_specifications(tag_spec(ResourceType::Instance))
        .tag_specifications(tag_spec(ResourceType::Volume))
        .tag_specifications(tag_spec(ResourceType::Fleet));
    if spot {
        request = request.spot_options(
            SpotOptionsRequest::builder().allocation_strategy(SpotAllocationStrategy::PriceCapacityOptimized).build(),
        );
    } else {
        let strategy = if prioritized {
            FleetOnDemandAllocationStrategy::Prioritized
        } else {
            FleetOnDemandAllocationStrategy::LowestPrice
        };
        request = request.on_demand_options(OnDemandOptionsRequest::builder().allocation_strategy(strategy).build());
    }
    for (lt, list) in configs {
        request = request.launch_template_configs(
            FleetLaunchTemplateConfigRequest::builder()
                .launch_template_specification(
                    FleetLaunchTemplateSpecificationRequest::builder()
                        .launch_template_name(lt)
                        .version("$Latest")
                        .build(),
                )
                .set_overrides(Some(list))
                .build(),
        );
    }
    let out = request.send().await.map_err(|e| AwsError::from_sdk("ec2:CreateFleet", e))?;

    for instance in out.instances() {
        let Some(id) = instance.instance_ids().first() else { continue };
        let chosen = instance.launch_template_and_overrides().and_then(|l| l.overrides());
        let instance_type = instance
            .instance_type()
            .map(|t| t.as_str().to_string())
            .or_else(|| chosen.and_then(|o| o.instance_type()).map(|t| t.as_str().to_string()));
        // The zone from the override, else from the subnet kerf asked for.
        let zone = chosen.and_then(|o| o.availability_zone()).map(str::to_string).or_else(|| {
            let subnet = chosen.and_then(|o| o.subnet_id())?;
            overrides.iter().find(|o| o.subnet_id == subnet).map(|o| o.zone.clone())
        });
        if let (Some(instance_type), Some(zone)) = (instance_type, zone) {
            return Ok(FleetResult::Launched(Launched { instance_id: id.to_string(), instance_type, zone }));
        }
        // The answer did not say which override it used: ask the instance itself.
        let described = crate::instances::describe(clients, id)
            .await?
            .ok_or_else(|| AwsError::new("ec2:CreateFleet", format!("launched instance {id} cannot be described")))?;
        return Ok(FleetResult::Launched(Launched {
            instance_id: id.to_string(),
            instance_type: described.instance_type,
            zone: described.zone,
        }));
    }

    let mut unavailable = Vec::new();
    let mut errors = Vec::new();
    for e in out.errors() {
        let code = e.error_code().unwrap_or_default();
        let chosen = e.launch_template_and_overrides().and_then(|l| l.overrides());
        let instance_type = chosen.and_then(|o| o.instance_type()).map(|t| t.as_str().to_string());
        let zone = chosen.and_then(|o| o.availability_zone()).map(str::to_string).or_else(|| {
            let subnet = chosen.and_then(|o| o.subnet_id())?;
            overrides.iter().find(|o| o.subnet_id == subnet).map(|o| o.zone.clone())
        });
        match (is_insufficient_capacity(code), instance_type, zone) {
            (true, Some(t), Some(z)) => unavailable.push((t, z)),
            (_, t, z) => errors.push(format!(
                "{code}: {} ({} in {})",
                e.error_message().unwrap_or_default(),
                t.unwrap_or_default(),
                z.unwrap_or_default()
            )),
        }
    }
    if unavailable.is_empty() && errors.is_empty() {
        errors.push("CreateFleet launched nothing and reported no error".to_string());
    }
    Ok(FleetResult::NotLaunched { unavailable, errors })
}
