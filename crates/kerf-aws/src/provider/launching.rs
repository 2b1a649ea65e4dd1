//! Launching a NodeClaim on EC2: the launch rule over the claim's offerings (after NodeOverlays,
//! with its class's capacity reservations), one launch template per AMI (and per reservation),
//! CreateFleet, and what a failed attempt teaches: an offering out of capacity is not tried again
//! for a while, a full reservation is not offered until it is described again, and the launch
//! moves on to the next offerings, or the next capacity type, at once.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use kerf_api::launch::{self, Offer, offering_allowed, type_meets};
use kerf_api::nodeclaim::NodeClaimStatus;
use kerf_api::{EC2NodeClass, InstanceType, NodeClaim, OfferingReservation, Requirements, Taint, TaintEffect, labels};
use kerf_cloud::CloudError;

use super::{AwsProvider, MAX_FLEET_ATTEMPTS};
use crate::instances;
use crate::launch::fleet::{self, FleetResult, MAX_INSTANCE_TYPES, Override, Purchase};
use crate::launch::template::{LaunchTemplateSpec, default_block_devices};
use crate::launch::userdata::{self, Bootstrap};
use crate::nodeclass::ResolvedNodeClass;
use crate::tags;

/// One way to launch the claim.
#[derive(Debug, Clone)]
pub(super) struct Candidate {
    pub(super) instance_type: Arc<InstanceType>,
    pub(super) zone: String,
    pub(super) capacity_type: String,
    pub(super) price: f64,
    /// The capacity reservation a `reserved` offering launches into.
    pub(super) reservation: Option<Arc<OfferingReservation>>,
}

impl Offer for Candidate {
    fn type_name(&self) -> &str {
        &self.instance_type.name
    }
    fn zone(&self) -> &str {
        &self.zone
    }
    fn capacity_type(&self) -> &str {
        &self.capacity_type
    }
    fn price(&self) -> f64 {
        self.price
    }
}

/// The launch rule ([`launch::choose`]) over `offers`: those of one capacity type, cheapest
/// first, at most 60 instance types; with that capacity type. `None` when none is left.
fn pick(offers: &[Candidate]) -> Option<(&'static str, Vec<Candidate>)> {
    let mut chosen = offers.to_vec();
    let capacity_type = launch::choose(&mut chosen)?;
    let mut kept_types: BTreeSet<String> = BTreeSet::new();
    chosen.retain(|c| {
        if kept_types.contains(&c.instance_type.name) {
            return true;
        }
        if kept_types.len() >= MAX_INSTANCE_TYPES {
            return false;
        }
        kept_types.insert(c.instance_type.name.clone());
        true
    });
    Some((capacity_type, chosen))
}

impl AwsProvider {
    /// Every offering `claim` allows and that is available now, of the types that suit it.
    pub(super) fn allowed(&self, claim: &NodeClaim, types: &[Arc<InstanceType>]) -> Result<Vec<Candidate>, CloudError> {
        let reqs = Requirements::from_node_selector(&claim.spec.requirements);
        let requests = &claim.spec.resources.requests;
        let region = self.region();
        let fitting: Vec<&Arc<InstanceType>> =
            types.iter().filter(|t| type_meets(&reqs, t, region) && t.fits(requests)).collect();
        if fitting.is_empty() {
            return Err(CloudError::InsufficientCapacity(format!(
                "NodeClaim {}: no instance type satisfies its requirements and resource requests",
                claim.name()
            )));
        }
        let mut out = Vec::new();
        for t in &fitting {
            for o in &t.offerings {
                if o.available && offering_allowed(&reqs, o) {
                    out.push(Candidate {
                        instance_type: Arc::clone(t),
                        zone: o.zone.clone(),
                        capacity_type: o.capacity_type.clone(),
                        price: o.price,
                        reservation: o.reservation.clone(),
                    });
                }
            }
        }
        Ok(out)
    }

    /// The offerings one launch of `claim` tries first (see [`pick`]).
    #[cfg(test)]
    pub(super) fn candidates(
        &self,
        claim: &NodeClaim,
        types: &[Arc<InstanceType>],
    ) -> Result<Vec<Candidate>, CloudError> {
        let offers = self.allowed(claim, types)?;
        pick(&offers).map(|(_, c)| c).ok_or_else(|| {
            CloudError::InsufficientCapacity(format!(
                "NodeClaim {}: every offering it allows is out of capacity",
                claim.name()
            ))
        })
    }

    /// The launch template for instances of `claim` booting `ami_id` with `capacity_type` (in
    /// `reservation`, if one).
    pub(super) fn template_spec(
        &self,
        resolved: &ResolvedNodeClass,
        claim: &NodeClaim,
        ami_id: &str,
        capacity_type: &str,
        reservation: Option<&OfferingReservation>,
    ) -> Result<LaunchTemplateSpec, CloudError> {
        let nc = &resolved.node_class;
        let spec = &nc.spec;
        let mut node_labels: BTreeMap<String, String> = claim
            .metadata
            .labels
            .iter()
            .flatten()
            .filter(|(k, _)| !labels::is_restricted_label(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        node_labels.insert(labels::CAPACITY_TYPE.to_string(), capacity_type.to_string());
        if let Some(r) = reservation {
            node_labels.insert(labels::CAPACITY_RESERVATION_ID.to_string(), r.id.clone());
            node_labels.insert(labels::CAPACITY_RESERVATION_TYPE.to_string(), r.reservation_type.clone());
            node_labels.insert(labels::CAPACITY_RESERVATION_INTERRUPTIBLE.to_string(), r.interruptible.to_string());
        }
        let mut taints: Vec<Taint> = claim.spec.taints.clone();
        taints.extend(claim.spec.startup_taints.iter().cloned());
        // Karpenter's nodes register tainted until it has seen them join.
        taints.push(Taint::new(labels::UNREGISTERED_TAINT_KEY, None, TaintEffect::NoExecute));
        let bootstrap = Bootstrap {
            cluster_name: &self.settings.cluster_name,
            cluster_endpoint: &self.settings.cluster_endpoint,
            ca_bundle: self.settings.cluster_ca_bundle.as_deref(),
            cluster_cidr: self.settings.cluster_cidr.as_deref(),
            kubelet: spec.kubelet.as_ref(),
            labels: &node_labels,
            taints: &taints,
            custom: spec.user_data.as_deref(),
        };
        let user_data = userdata::user_data(resolved.family, &bootstrap)
            .map_err(|e| CloudError::NodeClassNotReady(format!("EC2NodeClass {}: {e}", nc.name())))?;
        let instance_profile = resolved.instance_profile.clone().ok_or_else(|| {
            CloudError::NodeClassNotReady(format!("EC2NodeClass {} has no instance profile", nc.name()))
        })?;
        let block_device_mappings = if spec.block_device_mappings.is_empty() {
            default_block_devices(resolved.family)
        } else {
            spec.block_device_mappings.clone()
        };
        Ok(LaunchTemplateSpec {
            cluster: self.settings.cluster_name.clone(),
            node_class: nc.name().to_string(),
            image_id: ami_id.to_string(),
            user_data,
            security_group_ids: resolved.security_groups.iter().map(|g| g.id.clone()).collect(),
            instance_profile,
            block_device_mappings,
            metadata_options: spec
                .metadata_options
                .clone()
                .unwrap_or_else(kerf_api::ec2nodeclass::MetadataOptions::karpenter_default),
            detailed_monitoring: spec.detailed_monitoring.unwrap_or(false),
            associate_public_ip_address: spec.associate_public_ip_address,
            tags: tags::launch_template_tags(&self.settings, nc),
            capacity_reservation_id: reservation.map(|r| r.id.clone()),
            capacity_block: reservation.is_some_and(|r| r.reservation_type == crate::reservations::TYPE_CAPACITY_BLOCK),
            no_open_reservations: reservation.is_none() && self.reserved_capacity(),
        })
    }

    pub(super) async fn launch(&self, claim: &NodeClaim) -> Result<NodeClaim, CloudError> {
        let class_name = claim.spec.node_class_ref.name.clone();
        let resolved = self.ready_node_class(&class_name)?;
        let nc = &resolved.node_class;
        let node_pool =
            claim.metadata.labels.as_ref().and_then(|l| l.get(labels::NODE_POOL)).cloned().ok_or_else(|| {
                CloudError::Invalid(format!("NodeClaim {} has no {} label", claim.name(), labels::NODE_POOL))
            })?;
        let overlays = self.node_overlays();
        let types = self.offered_types(&resolved, &kerf_api::overlay::claim_context(claim)).await?;
        let mut offers = self.allowed(claim, &types)?;
        let instance_tags = tags::instance_tags(&self.settings, nc, &node_pool, claim.name());

        let mut failures: Vec<String> = Vec::new();
        let mut attempts = 0;
        while let Some((capacity_type, candidates)) = pick(&offers) {
            // A full reservation moves on at once: only other capacity types count as attempts.
            let reserved = capacity_type == labels::CAPACITY_TYPE_RESERVED;
            if !reserved {
                attempts += 1;
                if attempts > MAX_FLEET_ATTEMPTS {
                    break;
                }
            }
            // A capacity block and an ODCR are bought differently: one kind per call, the
            // cheapest offering's.
            let is_block = |c: &Candidate| {
                c.reservation.as_ref().is_some_and(|r| r.reservation_type == crate::reservations::TYPE_CAPACITY_BLOCK)
            };
            let block = reserved && candidates.first().is_some_and(is_block);
            let purchase = if reserved {
                Purchase::Reserved { capacity_block: block }
            } else if capacity_type == labels::CAPACITY_TYPE_SPOT {
                Purchase::Spot
            } else if overlays.is_empty() {
                Purchase::OnDemand
            } else {
                // Overlay prices rank the overrides; EC2's lowest-price would use its own.
                Purchase::OnDemandPrioritized
            };
            // One launch template per AMI (and reservation); each type boots the newest AMI it can.
            let mut overrides = Vec::new();
            let mut templates: BTreeMap<(String, Option<String>), String> = BTreeMap::new();
            for c in &candidates {
                if reserved && is_block(c) != block {
                    continue;
                }
                let Some(ami) = resolved.amis.iter().find(|a| a.fits(&c.instance_type.labels)) else { continue };
                let Some(subnet) = resolved.subnets.iter().find(|s| s.zone == c.zone) else { continue };
                let key = (ami.id.clone(), c.reservation.as_ref().map(|r| r.id.clone()));
                let lt = match templates.get(&key) {
                    Some(name) => name.clone(),
                    None => {
                        let spec =
                            self.template_spec(&resolved, claim, &ami.id, capacity_type, c.reservation.as_deref())?;
                        let name = self.templates.ensure(&self.clients, &spec).await?;
                        templates.insert(key, name.clone());
                        name
                    }
                };
                overrides.push((
                    c,
                    Override {
                        instance_type: c.instance_type.name.clone(),
                        zone: c.zone.clone(),
                        subnet_id: subnet.id.clone(),
                        launch_template: lt,
                        price: c.price,
                    },
                ));
            }
            if overrides.is_empty() {
                break;
            }
            let tried: Vec<Candidate> = overrides.iter().map(|(c, _)| Candidate::clone(c)).collect();
            let overrides: Vec<Override> = overrides.into_iter().map(|(_, o)| o).collect();
            let result = match fleet::create_fleet(&self.clients, purchase, &overrides, &instance_tags).await {
                Ok(r) => r,
                Err(e) => {
                    if e.code.as_deref().is_some_and(|c| c.starts_with("InvalidLaunchTemplate")) {
                        for name in templates.values() {
                            self.templates.forget(name);
                        }
                    }
                    return Err(e.into());
                }
            };
            match result {
                FleetResult::Launched(l) => {
                    let chosen = tried
                        .iter()
                        .find(|c| c.instance_type.name == l.instance_type && c.zone == l.zone)
                        .or_else(|| tried.iter().find(|c| c.instance_type.name == l.instance_type))
                        .cloned()
                        .ok_or_else(|| {
                            CloudError::Other(format!(
                                "CreateFleet launched {} which kerf did not ask for",
                                l.instance_type
                            ))
                        })?;
                    if let Some(r) = &chosen.reservation {
                        self.took_from_reservation(&r.id);
                    }
                    let image =
                        resolved.amis.iter().find(|a| a.fits(&chosen.instance_type.labels)).map(|a| a.id.clone());
                    return Ok(self.launched_claim(claim, nc, &chosen, &l, image));
                }
                FleetResult::NotLaunched { unavailable, errors } => {
                    if !errors.is_empty() && unavailable.is_empty() {
                        return Err(CloudError::Other(format!(
                            "NodeClaim {}: CreateFleet failed: {}",
                            claim.name(),
                            errors.join("; ")
                        )));
                    }
                    let failed = |c: &Candidate| {
                        c.capacity_type == capacity_type
                            && unavailable.iter().any(|(t, z)| *t == c.instance_type.name && *z == c.zone)
                    };
                    for c in tried.iter().filter(|c| failed(c)) {
                        match &c.reservation {
                            Some(r) => {
                                self.reservation_exhausted(&r.id);
                                failures.push(format!("{}/{}/reserved {}", c.instance_type.name, c.zone, r.id));
                            }
                            None => {
                                self.mark_unavailable(&c.instance_type.name, &c.zone, capacity_type);
                                failures.push(format!("{}/{}/{capacity_type}", c.instance_type.name, c.zone));
                            }
                        }
                    }
                    let before = offers.len();
                    offers.retain(|c| !failed(c));
                    if offers.len() == before {
                        // EC2 named no offering kerf asked for: nothing new to try.
                        break;
                    }
                }
            }
        }
        Err(CloudError::InsufficientCapacity(format!(
            "NodeClaim {}: no capacity for {}",
            claim.name(),
            if failures.is_empty() { "any offering it allows".to_string() } else { failures.join(", ") }
        )))
    }

    pub(super) fn launched_claim(
        &self,
        claim: &NodeClaim,
        nc: &EC2NodeClass,
        chosen: &Candidate,
        launched: &fleet::Launched,
        image: Option<String>,
    ) -> NodeClaim {
        let itype = &chosen.instance_type;
        let mut node_labels = claim.metadata.labels.clone().unwrap_or_default();
        node_labels.extend(itype.labels.iter().map(|(k, v)| (k.clone(), v.clone())));
        node_labels.insert(labels::ZONE.to_string(), launched.zone.clone());
        node_labels.insert(labels::REGION.to_string(), self.region().to_string());
        node_labels.insert(labels::CAPACITY_TYPE.to_string(), chosen.capacity_type.clone());
        if let Some(r) = &chosen.reservation {
            node_labels.insert(labels::CAPACITY_RESERVATION_ID.to_string(), r.id.clone());
            node_labels.insert(labels::CAPACITY_RESERVATION_TYPE.to_string(), r.reservation_type.clone());
            node_labels.insert(labels::CAPACITY_RESERVATION_INTERRUPTIBLE.to_string(), r.interruptible.to_string());
        }
        node_labels.insert(labels::AWS_EC2_NODE_CLASS.to_string(), nc.name().to_string());
        let mut out = claim.clone();
        out.metadata.labels = Some(node_labels);
        let annotations = out.metadata.annotations.get_or_insert_with(BTreeMap::new);
        annotations.insert(labels::NODECLASS_HASH.to_string(), nc.static_hash());
        annotations
            .insert(labels::NODECLASS_HASH_VERSION.to_string(), kerf_api::hash::EC2NODECLASS_HASH_VERSION.to_string());
        let status = out.status.get_or_insert_with(NodeClaimStatus::default);
        status.provider_id = Some(instances::provider_id(&launched.zone, &launched.instance_id));
        status.image_id = image;
        status.capacity = itype.capacity.clone();
        status.allocatable = itype.allocatable();
        out
    }
}

#[cfg(test)]
mod tests {
    use kerf_api::Offering;
    use kerf_api::{Quantity, ResourceList};

    use super::*;
    use crate::AwsClients;
    use crate::settings::AwsSettings;

    fn offline() -> AwsProvider {
        let config = aws_config::SdkConfig::builder()
            .region(aws_config::Region::new("us-west-2"))
            .behavior_version(aws_config::BehaviorVersion::latest())
            .build();
        let clients = AwsClients::from_sdk_config(&config).unwrap_or_else(|e| panic!("{e}"));
        AwsProvider::new(clients, AwsSettings::new("c", "https://c", "1.33"), Arc::new(kerf_cloud::ManualClock::new()))
    }

    fn itype(name: &str, on_demand: f64, spot: f64) -> Arc<InstanceType> {
        let offering = |ct: &str, price: f64| Offering {
            zone: "us-west-2a".into(),
            capacity_type: ct.into(),
            price,
            available: true,
            reservation: None,
        };
        Arc::new(InstanceType {
            name: name.to_string(),
            labels: BTreeMap::from([(labels::INSTANCE_TYPE.to_string(), name.to_string())]),
            capacity: ResourceList::new().with("cpu", Quantity::from_units(4)),
            overhead: ResourceList::new(),
            offerings: vec![offering("spot", spot), offering("on-demand", on_demand)],
            price_estimated: false,
        })
    }

    fn claim(capacity_types: &str) -> NodeClaim {
        let yaml = format!(
            "metadata: {{name: c1, labels: {{karpenter.sh/nodepool: p}}}}\nspec:\n  nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: d}}\n  \
             requirements: [{{key: karpenter.sh/capacity-type, operator: In, values: [{capacity_types}]}}]\n"
        );
        serde_yaml_ng::from_str(&yaml).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn spot_offerings_pricier_than_the_cheapest_on_demand_are_dropped() {
        let p = offline();
        let types = vec![itype("a.large", 0.10, 0.05), itype("b.large", 0.20, 0.15), itype("c.large", 0.30, 0.12)];
        let chosen = p.candidates(&claim("spot, on-demand"), &types).unwrap_or_else(|e| panic!("{e}"));
        let names: Vec<(&str, &str)> =
            chosen.iter().map(|c| (c.instance_type.name.as_str(), c.capacity_type.as_str())).collect();
        assert_eq!(names, vec![("a.large", "spot")]);
        // A spot-only claim has no on-demand to compare with: every spot offering stays, cheapest first.
        let chosen = p.candidates(&claim("spot"), &types).unwrap_or_else(|e| panic!("{e}"));
        let names: Vec<&str> = chosen.iter().map(|c| c.instance_type.name.as_str()).collect();
        assert_eq!(names, vec!["a.large", "c.large", "b.large"]);
    }

    #[test]
    fn a_launch_whose_every_spot_offering_is_pricier_than_on_demand_is_on_demand() {
        let p = offline();
        let types = vec![itype("a.large", 0.10, 0.12), itype("b.large", 0.20, 0.25)];
        let chosen = p.candidates(&claim("spot, on-demand"), &types).unwrap_or_else(|e| panic!("{e}"));
        let names: Vec<(&str, &str)> =
            chosen.iter().map(|c| (c.instance_type.name.as_str(), c.capacity_type.as_str())).collect();
        assert_eq!(names, vec![("a.large", "on-demand"), ("b.large", "on-demand")]);
    }

    #[test]
    fn at_most_sixty_instance_types_go_to_one_launch() {
        let p = offline();
        let types: Vec<Arc<InstanceType>> =
            (0..70).map(|i| itype(&format!("t{i:02}.large"), 1.0 + f64::from(i), 0.5)).collect();
        let chosen = p.candidates(&claim("on-demand"), &types).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(chosen.len(), MAX_INSTANCE_TYPES);
        assert_eq!(chosen[0].instance_type.name, "t00.large");
        assert_eq!(chosen[59].instance_type.name, "t59.large");
    }

    #[test]
    fn unavailable_offerings_are_not_candidates() {
        let p = offline();
        let mut t = InstanceType::clone(&itype("a.large", 0.10, 0.05));
        t.offerings[0].available = false;
        let chosen = p.candidates(&claim("spot, on-demand"), &[Arc::new(t)]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(chosen.len(), 1);
        assert_eq!(chosen[0].capacity_type, "on-demand");
        let none = p.candidates(
            &claim("spot"),
            &[itype("a.large", 0.1, 0.05)].map(|t| {
                let mut t = InstanceType::clone(&t);
                t.offerings.iter_mut().for_each(|o| o.available = false);
                Arc::new(t)
            }),
        );
        assert!(matches!(none, Err(CloudError::InsufficientCapacity(_))));
    }
}
