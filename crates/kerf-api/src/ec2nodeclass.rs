//! `karpenter.k8s.aws/v1` EC2NodeClass.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::duration::GoDuration;
use crate::quantity::Quantity;
use crate::shared::{Condition, NodeSelectorRequirementWithMinValues, object_meta_schema};

pub const API_VERSION: &str = "karpenter.k8s.aws/v1";
pub const KIND: &str = "EC2NodeClass";
pub const GROUP: &str = "karpenter.k8s.aws";

// Condition types of an EC2NodeClass's status (Karpenter's). `Ready` is True when every one of
// [`READY_DEPENDS_ON`] is (see [`crate::shared::root_condition`]).
pub const CONDITION_READY: &str = "Ready";
pub const CONDITION_SUBNETS_READY: &str = "SubnetsReady";
pub const CONDITION_SECURITY_GROUPS_READY: &str = "SecurityGroupsReady";
pub const CONDITION_AMIS_READY: &str = "AMIsReady";
pub const CONDITION_INSTANCE_PROFILE_READY: &str = "InstanceProfileReady";
pub const CONDITION_VALIDATION_SUCCEEDED: &str = "ValidationSucceeded";
/// The class's capacity reservations were read (with Karpenter's `ReservedCapacity` gate). Not
/// one of [`READY_DEPENDS_ON`] in kerf: a class whose reservations cannot be read launches
/// without them.
pub const CONDITION_CAPACITY_RESERVATIONS_READY: &str = "CapacityReservationsReady";

/// The conditions `Ready` depends on, in the (alphabetical) order they are listed.
pub const READY_DEPENDS_ON: [&str; 5] = [
    CONDITION_AMIS_READY,
    CONDITION_INSTANCE_PROFILE_READY,
    CONDITION_SECURITY_GROUPS_READY,
    CONDITION_SUBNETS_READY,
    CONDITION_VALIDATION_SUCCEEDED,
];

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EC2NodeClass {
    #[serde(default = "default_api_version")]
    pub api_version: String,
    #[serde(default = "default_kind")]
    pub kind: String,
    #[serde(default)]
    #[schemars(schema_with = "object_meta_schema")]
    pub metadata: ObjectMeta,
    pub spec: EC2NodeClassSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<EC2NodeClassStatus>,
}

fn default_api_version() -> String {
    API_VERSION.to_string()
}
fn default_kind() -> String {
    KIND.to_string()
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EC2NodeClassSpec {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 30))]
    pub subnet_selector_terms: Vec<SubnetSelectorTerm>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 30))]
    pub security_group_selector_terms: Vec<SecurityGroupSelectorTerm>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 30))]
    pub capacity_reservation_selector_terms: Vec<CapacityReservationSelectorTerm>,
    #[serde(default, rename = "associatePublicIPAddress", skip_serializing_if = "Option::is_none")]
    pub associate_public_ip_address: Option<bool>,
    /// IPv4 prefixes assigned to the network interface (prefix delegation), 0 or more.
    #[serde(default, rename = "ipPrefixCount", skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub ip_prefix_count: Option<i32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 30))]
    pub ami_selector_terms: Vec<AmiSelectorTerm>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ami_family: Option<AmiFamily>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_data: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_profile: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubelet: Option<KubeletConfiguration>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 50))]
    pub block_device_mappings: Vec<BlockDeviceMapping>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_store_policy: Option<InstanceStorePolicy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detailed_monitoring: Option<bool>,
    /// Instance metadata service settings; Karpenter defaults the whole block (see
    /// [`MetadataOptions::karpenter_default`]) and each field of a partial block.
    #[serde(default = "default_metadata_options", skip_serializing_if = "Option::is_none")]
    pub metadata_options: Option<MetadataOptions>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enclave_options: Option<EnclaveOptions>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    /// The EC2 placement group instances launch into, by name or id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement_group_selector: Option<PlacementGroupSelector>,
    /// The network interfaces of launched instances (EFA-only interfaces on further cards).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub network_interfaces: Vec<NetworkInterface>,
    /// Idle timeouts of the security group connection tracking on the instances' interfaces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connection_tracking: Option<ConnectionTracking>,
    /// CPU options of launched instances.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_options: Option<CpuOptions>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PlacementGroupSelector {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum NetworkInterfaceType {
    #[serde(rename = "interface")]
    Interface,
    #[serde(rename = "efa-only")]
    EfaOnly,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NetworkInterface {
    pub network_card_index: i32,
    pub device_index: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interface_type: Option<NetworkInterfaceType>,
}

/// A timeout in whole seconds, or a duration string.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum Timeout {
    Seconds(i64),
    Duration(GoDuration),
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ConnectionTracking {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp_established_timeout: Option<Timeout>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub udp_stream_timeout: Option<Timeout>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub udp_timeout: Option<Timeout>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CpuOptions {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub core_count: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threads_per_core: Option<i32>,
    /// `enabled` or `disabled`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub amd_sev_snp: Option<String>,
}

/// Nitro Enclaves.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EnclaveOptions {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SubnetSelectorTerm {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SecurityGroupSelectorTerm {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CapacityReservationSelectorTerm {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, rename = "ownerID", skip_serializing_if = "Option::is_none")]
    pub owner_id: Option<String>,
    /// `open` or `targeted`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_match_criteria: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AmiSelectorTerm {
    /// `family@version`, e.g. `al2023@latest`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alias: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssm_parameter: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum AmiFamily {
    AL2,
    AL2023,
    Bottlerocket,
    Windows2019,
    Windows2022,
    Windows2025,
    Custom,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum InstanceStorePolicy {
    RAID0,
}

/// Kubelet settings that shape a node's allocatable capacity and pod density.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KubeletConfiguration {
    #[serde(default, rename = "clusterDNS", skip_serializing_if = "Vec::is_empty")]
    pub cluster_dns: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_pods: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pods_per_core: Option<i32>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub system_reserved: BTreeMap<String, Quantity>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub kube_reserved: BTreeMap<String, Quantity>,
    /// Signal → threshold, e.g. `memory.available: 100Mi` or `nodefs.available: 10%`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub eviction_hard: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub eviction_soft: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub eviction_soft_grace_period: BTreeMap<String, GoDuration>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eviction_max_pod_grace_period: Option<i32>,
    #[serde(default, rename = "imageGCHighThresholdPercent", skip_serializing_if = "Option::is_none")]
    pub image_gc_high_threshold_percent: Option<i32>,
    #[serde(default, rename = "imageGCLowThresholdPercent", skip_serializing_if = "Option::is_none")]
    pub image_gc_low_threshold_percent: Option<i32>,
    #[serde(default, rename = "cpuCFSQuota", skip_serializing_if = "Option::is_none")]
    pub cpu_cfs_quota: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BlockDeviceMapping {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ebs: Option<BlockDevice>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root_volume: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BlockDevice {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delete_on_termination: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted: Option<bool>,
    #[serde(default, rename = "iops", skip_serializing_if = "Option::is_none")]
    pub iops: Option<i64>,
    #[serde(default, rename = "kmsKeyID", skip_serializing_if = "Option::is_none")]
    pub kms_key_id: Option<String>,
    #[serde(default, rename = "snapshotID", skip_serializing_if = "Option::is_none")]
    pub snapshot_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throughput: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_initialization_rate: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_size: Option<Quantity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_type: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MetadataOptions {
    /// `enabled` (default) or `disabled`.
    #[serde(default = "default_http_endpoint", skip_serializing_if = "Option::is_none")]
    pub http_endpoint: Option<String>,
    /// `disabled` (default) or `enabled`.
    #[serde(
        default = "default_http_protocol_ipv6",
        rename = "httpProtocolIPv6",
        skip_serializing_if = "Option::is_none"
    )]
    pub http_protocol_ipv6: Option<String>,
    /// 1..=64, default 1.
    #[serde(default = "default_hop_limit", skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 64))]
    pub http_put_response_hop_limit: Option<i64>,
    /// `required` (default, IMDSv2 only) or `optional`.
    #[serde(default = "default_http_tokens", skip_serializing_if = "Option::is_none")]
    pub http_tokens: Option<String>,
}

impl MetadataOptions {
    /// The block Karpenter applies when none is given.
    pub fn karpenter_default() -> Self {
        MetadataOptions {
            http_endpoint: default_http_endpoint(),
            http_protocol_ipv6: default_http_protocol_ipv6(),
            http_put_response_hop_limit: default_hop_limit(),
            http_tokens: default_http_tokens(),
        }
    }
}

fn default_metadata_options() -> Option<MetadataOptions> {
    Some(MetadataOptions::karpenter_default())
}
fn default_http_endpoint() -> Option<String> {
    Some("enabled".to_string())
}
fn default_http_protocol_ipv6() -> Option<String> {
    Some("disabled".to_string())
}
fn default_hop_limit() -> Option<i64> {
    Some(1)
}
fn default_http_tokens() -> Option<String> {
    Some("required".to_string())
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EC2NodeClassStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subnets: Vec<SubnetStatus>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub security_groups: Vec<SecurityGroupStatus>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub amis: Vec<AmiStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_profile: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capacity_reservations: Vec<CapacityReservationStatus>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// A capacity reservation the selector terms resolved to.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CapacityReservationStatus {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub availability_zone: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>")]
    pub end_time: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_match_criteria: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_type: Option<String>,
    #[serde(default, rename = "ownerID", skip_serializing_if = "Option::is_none")]
    pub owner_id: Option<String>,
    /// `default` or `capacity-block`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reservation_type: Option<String>,
    /// `active` or `expiring`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// Whether EC2 may reclaim the reservation's capacity (interruptible reservations).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interruptible: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SubnetStatus {
    pub id: String,
    pub zone: String,
    #[serde(default, rename = "zoneID", skip_serializing_if = "Option::is_none")]
    pub zone_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SecurityGroupStatus {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AmiStatus {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requirements: Vec<NodeSelectorRequirementWithMinValues>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deprecated: Option<bool>,
}

impl EC2NodeClassStatus {
    /// What the account resolved the class to: its subnets, security groups, images and
    /// instance profile, without conditions or reservations. `None` when it resolved none of
    /// the first three (the part a snapshot keeps and a simulation answers with).
    pub fn resolved(&self) -> Option<EC2NodeClassStatus> {
        if self.subnets.is_empty() && self.security_groups.is_empty() && self.amis.is_empty() {
            return None;
        }
        Some(EC2NodeClassStatus {
            subnets: self.subnets.clone(),
            security_groups: self.security_groups.clone(),
            amis: self.amis.clone(),
            instance_profile: self.instance_profile.clone(),
            ..Default::default()
        })
    }
}

impl AmiStatus {
    /// Whether an instance type with `type_labels` can boot this image.
    pub fn fits(&self, type_labels: &BTreeMap<String, String>) -> bool {
        image_fits(&self.requirements, type_labels)
    }
}

/// Whether an instance type with `type_labels` meets an image's `requirements` (its
/// architecture, and for some images whether the type has GPUs or accelerators). Images carry
/// no numeric bounds: `Gt`/`Lt` terms are not theirs and pass.
pub fn image_fits(
    requirements: &[NodeSelectorRequirementWithMinValues],
    type_labels: &BTreeMap<String, String>,
) -> bool {
    use crate::shared::Operator;
    requirements.iter().all(|r| {
        let value = type_labels.get(&r.key);
        match r.operator {
            Operator::In => value.is_some_and(|v| r.values.contains(v)),
            Operator::NotIn => value.is_none_or(|v| !r.values.contains(v)),
            Operator::Exists => value.is_some(),
            Operator::DoesNotExist => value.is_none(),
            _ => true,
        }
    })
}

impl EC2NodeClass {
    pub fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or("")
    }

    /// Why instances cannot be launched with this node class yet: its `Ready` condition's
    /// message (or reason) when that is not True, `awaiting reconciliation` when it has none.
    /// `None` when it is Ready.
    pub fn not_ready(&self) -> Option<String> {
        let ready = self.status.as_ref().and_then(|s| crate::shared::find_condition(&s.conditions, CONDITION_READY));
        match ready {
            Some(c) if c.is_true() => None,
            Some(c) => Some(
                c.message
                    .clone()
                    .filter(|m| !m.is_empty())
                    .or_else(|| c.reason.clone())
                    .unwrap_or_else(|| format!("condition Ready is {}", c.status)),
            ),
            None => Some("awaiting reconciliation".to_string()),
        }
    }
}
