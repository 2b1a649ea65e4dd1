//! Launch templates: one per distinct launch configuration (node class, AMI, user data,
//! security groups, instance profile, block devices, metadata options, monitoring, tags), named
//! `karpenter.k8s.aws/<hash of that configuration>` as Karpenter names them, created on first use
//! and remembered, so that the same configuration is never created twice.

use std::collections::BTreeMap;
use std::sync::Mutex;

use aws_sdk_ec2::types::{
    CapacityReservationPreference, CapacityReservationTarget, Filter, LaunchTemplateBlockDeviceMappingRequest,
    LaunchTemplateCapacityReservationSpecificationRequest, LaunchTemplateEbsBlockDeviceRequest,
    LaunchTemplateHttpTokensState, LaunchTemplateIamInstanceProfileSpecificationRequest,
    LaunchTemplateInstanceMarketOptionsRequest, LaunchTemplateInstanceMetadataEndpointState,
    LaunchTemplateInstanceMetadataOptionsRequest, LaunchTemplateInstanceMetadataProtocolIpv6,
    LaunchTemplateInstanceNetworkInterfaceSpecificationRequest, LaunchTemplatesMonitoringRequest, MarketType,
    RequestLaunchTemplateData, ResourceType, TagSpecification, VolumeType,
};
use kerf_api::Quantity;
use kerf_api::ec2nodeclass::{AmiFamily, BlockDevice, BlockDeviceMapping, MetadataOptions};
use serde::Serialize;

use crate::AwsClients;
use crate::error::AwsError;
use crate::tags::{LAUNCH_TEMPLATE_CLUSTER, ec2_tags};

/// The prefix of every launch template name kerf creates.
pub const NAME_PREFIX: &str = "karpenter.k8s.aws/";

/// Everything a launch template is made of. Its hash is its name.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LaunchTemplateSpec {
    pub cluster: String,
    pub node_class: String,
    pub image_id: String,
    /// Plain text; base64-encoded when sent.
    pub user_data: String,
    pub security_group_ids: Vec<String>,
    pub instance_profile: String,
    pub block_device_mappings: Vec<BlockDeviceMapping>,
    pub metadata_options: MetadataOptions,
    pub detailed_monitoring: bool,
    pub associate_public_ip_address: Option<bool>,
    pub tags: BTreeMap<String, String>,
    /// The capacity reservation its instances launch into (targeted), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity_reservation_id: Option<String>,
    /// That reservation is a capacity block (market type `capacity-block`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub capacity_block: bool,
    /// Without a reservation target: its instances stay out of `open` reservations
    /// (`CapacityReservationPreference: none`), as Karpenter's spot and on-demand launches do
    /// with its `ReservedCapacity` gate, so that EC2 puts them in no reservation kerf did not
    /// choose (docs/design.md, "Capacity reservations").
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub no_open_reservations: bool,
}

impl LaunchTemplateSpec {
    /// `karpenter.k8s.aws/<FNV-1a 64 of the spec's JSON>`.
    pub fn name(&self) -> String {
        let json = serde_json::to_string(self).unwrap_or_default();
        format!("{NAME_PREFIX}{}", kerf_cloud::aws::catalog::fnv1a64(&json))
    }
}

/// The block devices of an AMI family when the node class maps none: a 20Gi gp3 root volume,
/// encrypted (Bottlerocket: a 4Gi OS volume and a 20Gi data volume).
pub fn default_block_devices(family: AmiFamily) -> Vec<BlockDeviceMapping> {
    let ebs = |gib: i64| BlockDevice {
        delete_on_termination: Some(true),
        encrypted: Some(true),
        volume_size: Some(Quantity::from_bytes(gib << 30)),
        volume_type: Some("gp3".to_string()),
        ..BlockDevice::default()
    };
    let device = |name: &str, gib: i64| BlockDeviceMapping {
        device_name: Some(name.to_string()),
        ebs: Some(ebs(gib)),
        root_volume: None,
    };
    match family {
        AmiFamily::AL2 | AmiFamily::AL2023 => vec![device("/dev/xvda", 20)],
        AmiFamily::Bottlerocket => vec![device("/dev/xvda", 4), device("/dev/xvdb", 20)],
        AmiFamily::Windows2019 | AmiFamily::Windows2022 | AmiFamily::Windows2025 => vec![device("/dev/sda1", 50)],
        AmiFamily::Custom => Vec::new(),
    }
}

/// A volume size in whole GiB, rounded up (EBS sizes volumes in GiB).
pub fn volume_gib(q: &Quantity) -> i32 {
    let bytes = q.value_ceil();
    i32::try_from((bytes + (1 << 30) - 1) >> 30).unwrap_or(i32::MAX)
}

fn block_device_request(m: &BlockDeviceMapping) -> LaunchTemplateBlockDeviceMappingRequest {
    let ebs = m.ebs.as_ref().map(|e| {
        LaunchTemplateEbsBlockDeviceRequest::builder()
            .set_delete_on_termination(e.delete_on_termination)
            .set_encrypted(e.encrypted)
            .set_iops(e.iops.and_then(|v| i32::try_from(v).ok()))
            .set_throughput(e.throughput.and_then(|v| i32::try_from(v).ok()))
            .set_kms_key_id(e.kms_key_id.clone())
            .set_snapshot_id(e.snapshot_id.clone())
            .set_volume_size(e.volume_size.as_ref().map(volume_gib))
            .set_volume_type(e.volume_type.as_deref().map(VolumeType::from))
            .build()
    });
    LaunchTemplateBlockDeviceMappingRequest::builder().set_device_name(m.device_name.clone()).set_ebs(ebs).build()
}

fn request_data(spec: &LaunchTemplateSpec) -> RequestLaunchTemplateData {
    let md = &spec.metadata_options;
    let metadata = LaunchTemplateInstanceMetadataOptionsRequest::builder()
        .set_http_endpoint(md.http_endpoint.as_deref().map(LaunchTemplateInstanceMetadataEndpointState::from))
        .set_http_protocol_ipv6(md.http_protocol_ipv6.as_deref().map(LaunchTemplateInstanceMetadataProtocolIpv6::from))
        .set_http_put_response_hop_limit(md.http_put_response_hop_limit.and_then(|v| i32::try_from(v).ok()))
        .set_http_tokens(md.http_tokens.as_deref().map(LaunchTemplateHttpTokensState::from))
        .build();
    let mut data = RequestLaunchTemplateData::builder()
        .image_id(&spec.image_id)
        .user_data(crate::base64::encode(spec.user_data.as_bytes()))
        .iam_instance_profile(
            LaunchTemplateIamInstanceProfileSpecificationRequest::builder().name(&spec.instance_profile).build(),
        )
        .set_block_device_mappings(Some(spec.block_device_mappings.iter().map(block_device_request).collect()))
        .metadata_options(metadata)
        .monitoring(LaunchTemplatesMonitoringRequest::builder().enabled(spec.detailed_monitoring).build());
    if let Some(id) = &spec.capacity_reservation_id {
        data = data.capacity_reservation_specification(
            LaunchTemplateCapacityReservationSpecificationRequest::builder()
                .capacity_reservation_preference(CapacityReservationPreference::CapacityReservationsOnly)
                .capacity_reservation_target(CapacityReservationTarget::builder().capacity_reservation_id(id).build())
                .build(),
        );
    } else if spec.no_open_reservations {
        data = data.capacity_reservation_specification(
            LaunchTemplateCapacityReservationSpecificationRequest::builder()
                .capacity_reservation_preference(CapacityReservationPreference::None)
                .build(),
        );
    }
    if spec.capacity_block {
        data = data.instance_market_options(
            LaunchTemplateInstanceMarketOptionsRequest::builder().market_type(MarketType::CapacityBlock).build(),
        );
    }
    match spec.associate_public_ip_address {
        // The public-IP choice lives on the network interface, which then carries the groups.
        Some(public) => {
            data = data.network_interfaces(
                LaunchTemplateInstanceNetworkInterfaceSpecificationRequest::builder()
                    .device_index(0)
                    .associate_public_ip_address(public)
                    .set_groups(Some(spec.security_group_ids.clone()))
                    .build(),
            );
        }
        None => data = data.set_security_group_ids(Some(spec.security_group_ids.clone())),
    }
    data.build()
}

/// Launch templates kerf knows to exist: name → ID.
#[derive(Debug, Default)]
pub struct LaunchTemplateCache {
    known: Mutex<BTreeMap<String, String>>,
}

impl LaunchTemplateCache {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, String>> {
        self.known.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Forgets a template (it was deleted behind kerf's back).
    pub fn forget(&self, name: &str) {
        self.lock().remove(name);
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The template for `spec`, created if it does not exist yet. Returns its name.
    pub async fn ensure(&self, clients: &AwsClients, spec: &LaunchTemplateSpec) -> Result<String, AwsError> {
        let name = spec.name();
        if self.lock().contains_key(&name) {
            return Ok(name);
        }
        match clients.ec2.describe_launch_templates().launch_template_names(&name).send().await {
            Ok(out) => {
                if let Some(id) = out.launch_templates().iter().find_map(|t| t.launch_template_id()) {
                    self.lock().insert(name.clone(), id.to_string());
                    return Ok(name);
                }
            }
            Err(e) => {
                let e = AwsError::from_sdk("ec2:DescribeLaunchTemplates", e);
                if !e.is_not_found() {
                    return Err(e);
                }
            }
        }
        let mut tags = spec.tags.clone();
        tags.insert(LAUNCH_TEMPLATE_CLUSTER.to_string(), spec.cluster.clone());
        let created = clients
            .ec2
            .create_launch_template()
            .launch_template_name(&name)
            .launch_template_data(request_data(spec))
            .tag_specifications(
                TagSpecification::builder()
                    .resource_type(ResourceType::LaunchTemplate)
                    .set_tags(Some(ec2_tags(&tags)))
                    .build(),
            )
            .send()
            .await;
        match created {
            Ok(out) => {
                let id = out.launch_template().and_then(|t| t.launch_template_id()).unwrap_or_default();
                self.lock().insert(name.clone(), id.to_string());
                Ok(name)
            }
            // Another replica (or an earlier attempt) made it meanwhile.
            Err(e) => {
                let e = AwsError::from_sdk("ec2:CreateLaunchTemplate", e);
                if e.code_is("InvalidLaunchTemplateName.AlreadyExistsException") { Ok(name) } else { Err(e) }
            }
        }
    }
}

/// Deletes every launch template of `node_class` in `cluster` (when the node class goes).
/// Returns the names deleted.
pub async fn delete_for_node_class(
    clients: &AwsClients,
    cache: &LaunchTemplateCache,
    cluster: &str,
    node_class: &str,
) -> Result<Vec<String>, AwsError> {
    let filters = vec![
        Filter::builder().name(format!("tag:{LAUNCH_TEMPLATE_CLUSTER}")).values(cluster).build(),
        Filter::builder().name(format!("tag:{}", kerf_api::labels::AWS_EC2_NODE_CLASS)).values(node_class).build(),
    ];
    let mut names = Vec::new();
    let mut token = None;
    loop {
        let out = clients
            .ec2
            .describe_launch_templates()
            .set_filters(Some(filters.clone()))
            .set_next_token(token)
            .send()
            .await
            .map_err(|e| AwsError::from_sdk("ec2:DescribeLaunchTemplates", e))?;
        names.extend(out.launch_templates().iter().filter_map(|t| t.launch_template_name().map(str::to_string)));
        token = out.next_token().map(str::to_string);
        if token.is_none() {
            break;
        }
    }
    for name in &names {
        cache.forget(name);
        if let Err(e) = clients.ec2.delete_launch_template().launch_template_name(name).send().await {
            let e = AwsError::from_sdk("ec2:DeleteLaunchTemplate", e);
            if !e.is_not_found() {
                return Err(e);
            }
        }
    }
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn volume_sizes_are_whole_gibibytes_rounded_up() {
        assert_eq!(volume_gib(&Quantity::from_bytes(20 << 30)), 20);
        assert_eq!(volume_gib(&Quantity::from_bytes((20 << 30) + 1)), 21);
        assert_eq!(volume_gib(&Quantity::from_units(100_000_000_000)), 94);
    }
}
