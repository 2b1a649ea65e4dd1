//! EC2 instances as kerf sees them: provider IDs (`aws:///<zone>/<instance-id>`), describing,
//! listing, rebooting and terminating, and only ever those tagged as this cluster's.

use std::collections::BTreeMap;

use aws_sdk_ec2::types::{Filter, Instance, InstanceLifecycleType};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kerf_api::nodeclaim::{NodeClaimSpec, NodeClaimStatus, ResourceRequirements};
use kerf_api::{NodeClaim, NodeClassReference, labels};
use kerf_cloud::{CloudError, Timestamp};

use crate::AwsClients;
use crate::error::AwsError;
use crate::tags::tag_map;

/// States of an instance that still exists for kerf (shutting-down and terminated ones are gone).
pub const LIVE_STATES: &[&str] = &["pending", "running", "stopping", "stopped"];

/// One instance, with what kerf reads from it.
#[derive(Debug, Clone, PartialEq)]
pub struct Ec2Instance {
    pub id: String,
    pub instance_type: String,
    pub zone: String,
    pub image_id: Option<String>,
    /// `pending`, `running`, `shutting-down`, `terminated`, `stopping`, `stopped`.
    pub state: String,
    /// `spot`, `reserved` (launched into a capacity reservation) or `on-demand`.
    pub capacity_type: String,
    /// The capacity reservation it runs in, if any.
    pub capacity_reservation_id: Option<String>,
    /// `default` or `capacity-block` when it runs in a capacity reservation.
    pub capacity_reservation_type: Option<String>,
    pub subnet_id: Option<String>,
    pub security_group_ids: Vec<String>,
    pub private_dns_name: Option<String>,
    pub launch_time: Option<Timestamp>,
    pub tags: BTreeMap<String, String>,
}

impl Ec2Instance {
    fn from_sdk(i: &Instance) -> Option<Ec2Instance> {
        let launch_time = i.launch_time().and_then(|t| Timestamp::from_second(t.secs()).ok());
        // EC2 names the reservation an instance runs in; spot instances run in none.
        let reservation = i.capacity_reservation_id().filter(|id| !id.is_empty()).map(str::to_string);
        Some(Ec2Instance {
            id: i.instance_id()?.to_string(),
            instance_type: i.instance_type()?.as_str().to_string(),
            zone: i.placement().and_then(|p| p.availability_zone())?.to_string(),
            image_id: i.image_id().map(str::to_string),
            state: i.state().and_then(|s| s.name()).map(|n| n.as_str().to_string()).unwrap_or_default(),
            capacity_type: if i.instance_lifecycle() == Some(&InstanceLifecycleType::Spot) {
                labels::CAPACITY_TYPE_SPOT.to_string()
            } else if reservation.is_some() {
                labels::CAPACITY_TYPE_RESERVED.to_string()
            } else {
                labels::CAPACITY_TYPE_ON_DEMAND.to_string()
            },
            capacity_reservation_type: reservation.as_ref().map(|_| {
                if i.instance_lifecycle() == Some(&InstanceLifecycleType::CapacityBlock) {
                    crate::reservations::TYPE_CAPACITY_BLOCK
                } else {
                    crate::reservations::TYPE_DEFAULT
                }
                .to_string()
            }),
            capacity_reservation_id: reservation,
            subnet_id: i.subnet_id().map(str::to_string),
            security_group_ids: i.security_groups().iter().filter_map(|g| g.group_id().map(str::to_string)).collect(),
            private_dns_name: i.private_dns_name().filter(|n| !n.is_empty()).map(str::to_string),
            launch_time,
            tags: tag_map(i.tags()),
        })
    }

    pub fn provider_id(&self) -> String {
        provider_id(&self.zone, &self.id)
    }

    pub fn is_live(&self) -> bool {
        LIVE_STATES.contains(&self.state.as_str())
    }

    /// Whether the instance is tagged as owned by `cluster` (the only instances kerf touches).
    pub fn is_owned_by(&self, cluster: &str) -> bool {
        self.tags.get(&format!("kubernetes.io/cluster/{cluster}")).is_some_and(|v| v == "owned")
    }

    /// The instance described as a NodeClaim: its name, NodePool and node class from its tags,
    /// its type's labels (`type_labels`, when the type is known), zone, region, capacity type
    /// and capacity reservation (id and type, as Karpenter labels them),
    /// and in its status the provider ID, image and the type's capacity and allocatable.
    pub fn to_node_claim(
        &self,
        region: &str,
        type_labels: Option<&BTreeMap<String, String>>,
        capacity: Option<(&kerf_api::ResourceList, &kerf_api::ResourceList)>,
    ) -> NodeClaim {
        let mut node_labels: BTreeMap<String, String> = type_labels.cloned().unwrap_or_default();
        node_labels.insert(labels::INSTANCE_TYPE.to_string(), self.instance_type.clone());
        node_labels.insert(labels::ZONE.to_string(), self.zone.clone());
        node_labels.insert(labels::REGION.to_string(), region.to_string());
        node_labels.insert(labels::CAPACITY_TYPE.to_string(), self.capacity_type.clone());
        if let (Some(id), Some(kind)) = (&self.capacity_reservation_id, &self.capacity_reservation_type) {
            node_labels.insert(labels::CAPACITY_RESERVATION_ID.to_string(), id.clone());
            node_labels.insert(labels::CAPACITY_RESERVATION_TYPE.to_string(), kind.clone());
        }
        for key in [labels::NODE_POOL, labels::AWS_EC2_NODE_CLASS] {
            if let Some(v) = self.tags.get(key) {
                node_labels.insert(key.to_string(), v.clone());
            }
        }
        let node_class = self.tags.get(labels::AWS_EC2_NODE_CLASS).cloned().unwrap_or_default();
        let (capacity, allocatable) = capacity.map(|(c, a)| (c.clone(), a.clone())).unwrap_or_default();
        NodeClaim {
            api_version: kerf_api::nodeclaim::API_VERSION.to_string(),
            kind: kerf_api::nodeclaim::KIND.to_string(),
            metadata: ObjectMeta {
                name: self.tags.get(labels::NODE_CLAIM).cloned(),
                labels: Some(node_labels),
                creation_timestamp: self.launch_time.map(Time),
                ..ObjectMeta::default()
            },
            spec: NodeClaimSpec {
                taints: Vec::new(),
                startup_taints: Vec::new(),
                requirements: Vec::new(),
                resources: ResourceRequirements::default(),
                node_class_ref: NodeClassReference {
                    group: kerf_api::ec2nodeclass::GROUP.to_string(),
                    kind: kerf_api::ec2nodeclass::KIND.to_string(),
                    name: node_class,
                },
                expire_after: kerf_api::nodepool::default_expire_after(),
                termination_grace_period: None,
            }
            .into(),
            status: Some(NodeClaimStatus {
                node_name: self.private_dns_name.clone(),
                provider_id: Some(self.provider_id()),
                image_id: self.image_id.clone(),
                capacity,
                allocatable,
                ..NodeClaimStatus::default()
            }),
        }
    }
}

/// `aws:///<zone>/<instance-id>`.
pub fn provider_id(zone: &str, instance_id: &str) -> String {
    format!("aws:///{zone}/{instance_id}")
}

/// The instance ID of a provider ID (`aws:///us-west-2a/i-0123…`; the zone may be empty).
pub fn parse_provider_id(provider_id: &str) -> Result<String, CloudError> {
    let rest = provider_id
        .strip_prefix("aws:///")
        .ok_or_else(|| CloudError::Invalid(format!("provider ID {provider_id:?} does not start with aws:///")))?;
    let id = rest.rsplit('/').next().unwrap_or(rest);
    if !id.starts_with("i-") || id.len() < 3 {
        return Err(CloudError::Invalid(format!("provider ID {provider_id:?} does not end with an instance ID")));
    }
    Ok(id.to_string())
}

async fn describe_with(
    clients: &AwsClients,
    ids: Vec<String>,
    filters: Vec<Filter>,
) -> Result<Vec<Ec2Instance>, AwsError> {
    let mut out = Vec::new();
    let mut token = None;
    loop {
        let page = clients
            .ec2
            .describe_instances()
            .set_instance_ids((!ids.is_empty()).then(|| ids.clone()))
            .set_filters((!filters.is_empty()).then(|| filters.clone()))
            .set_next_token(token)
            .send()
            .await
            .map_err(|e| AwsError::from_sdk("ec2:DescribeInstances", e))?;
        for r in page.reservations() {
            out.extend(r.instances().iter().filter_map(Ec2Instance::from_sdk));
        }
        token = page.next_token().map(str::to_string);
        if token.is_none() {
            break;
        }
    }
    Ok(out)
}

/// The instance with this ID, if EC2 knows it (in any state).
pub async fn describe(clients: &AwsClients, instance_id: &str) -> Result<Option<Ec2Instance>, AwsError> {
    match describe_with(clients, vec![instance_id.to_string()], Vec::new()).await {
        Ok(list) => Ok(list.into_iter().find(|i| i.id == instance_id)),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e),
    }
}

/// Every live instance tagged as `cluster`'s and launched for a NodePool.
pub async fn list_owned(clients: &AwsClients, cluster: &str) -> Result<Vec<Ec2Instance>, AwsError> {
    let filters = vec![
        Filter::builder().name(format!("tag:kubernetes.io/cluster/{cluster}")).values("owned").build(),
        Filter::builder().name("tag-key").values(labels::NODE_POOL).build(),
        Filter::builder()
            .name("instance-state-name")
            .set_values(Some(LIVE_STATES.iter().map(|s| s.to_string()).collect()))
            .build(),
    ];
    let mut list = describe_with(clients, Vec::new(), filters).await?;
    // Filters are the server's business; ownership is checked here again all the same.
    list.retain(|i| i.is_owned_by(cluster) && i.is_live());
    list.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(list)
}

/// Terminates an instance.
pub async fn terminate(clients: &AwsClients, instance_id: &str) -> Result<(), AwsError> {
    clients
        .ec2
        .terminate_instances()
        .instance_ids(instance_id)
        .send()
        .await
        .map_err(|e| AwsError::from_sdk("ec2:TerminateInstances", e))?;
    Ok(())
}

/// Reboots an instance in place (EC2 RebootInstances: the request is queued; the instance keeps
/// its ID, addresses and volumes).
pub async fn reboot(clients: &AwsClients, instance_id: &str) -> Result<(), AwsError> {
    clients
        .ec2
        .reboot_instances()
        .instance_ids(instance_id)
        .send()
        .await
        .map_err(|e| AwsError::from_sdk("ec2:RebootInstances", e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_ids_name_the_zone_and_instance() {
        assert_eq!(provider_id("us-west-2a", "i-0abc"), "aws:///us-west-2a/i-0abc");
        assert_eq!(parse_provider_id("aws:///us-west-2a/i-0abc"), Ok("i-0abc".to_string()));
        assert_eq!(parse_provider_id("aws:///i-0abc"), Ok("i-0abc".to_string()));
        assert!(parse_provider_id("kwok://node-1").is_err());
        assert!(parse_provider_id("aws:///us-west-2a/vol-1").is_err());
    }
}
