//! [`AwsProvider`]: kerf's [`CloudProvider`] over EC2. It keeps what it resolved per node class,
//! the launch templates it made, the region's instance types, on-demand and spot prices
//! (each refreshed on its own schedule), and the offerings that recently had no capacity.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use kerf_api::launch::{self, Offer, offering_allowed, type_meets};
use kerf_api::nodeclaim::NodeClaimStatus;
use kerf_api::{EC2NodeClass, NodeClaim, NodePool, Taint, TaintEffect, labels};
use kerf_api::{InstanceType, Requirements};
use kerf_cloud::aws::NodeClassSettings;
use kerf_cloud::clock::add;
use kerf_cloud::{Clock, CloudError, CloudProvider, InterruptionKind, InterruptionNotice, Timestamp};

use crate::AwsClients;
use crate::instance_types::{self, Source, SpotPrices, TypeTable};
use crate::instances::{self, Ec2Instance};
use crate::interruption::{InterruptionEvent, InterruptionQueue};
use crate::launch::fleet::{self, FleetResult, MAX_INSTANCE_TYPES, Override};
use crate::launch::template::{LaunchTemplateCache, LaunchTemplateSpec, default_block_devices};
use crate::launch::userdata::{self, Bootstrap};
use crate::nodeclass::{self, ResolvedNodeClass};
use crate::pricing::{self, OnDemandPrices};
use crate::settings::AwsSettings;
use crate::tags;

/// How long an offering that failed with insufficient capacity is not tried again.
pub const INSUFFICIENT_CAPACITY_TTL: Duration = Duration::from_secs(3 * 60);
/// How often the region's instance types are read again.
pub const INSTANCE_TYPES_REFRESH: Duration = Duration::from_secs(60 * 60);
/// How often spot prices are read again.
pub const SPOT_PRICES_REFRESH: Duration = Duration::from_secs(5 * 60);
/// How often on-demand prices are read again from the Price List API.
pub const ON_DEMAND_PRICES_REFRESH: Duration = Duration::from_secs(12 * 60 * 60);
/// How soon the Price List API is asked again after it could not answer (the built-in table
/// prices meanwhile).
pub const ON_DEMAND_PRICES_RETRY: Duration = Duration::from_secs(60 * 60);
/// CreateFleet calls one launch may make, each without the offerings the previous ones found
/// out of capacity.
pub const MAX_FLEET_ATTEMPTS: usize = 3;
/// How long after a spot interruption warning EC2 reclaims the instance.
pub const SPOT_INTERRUPTION_NOTICE: Duration = Duration::from_secs(2 * 60);
/// How often a resolved node class is resolved again (subnets fill up, AMIs are released).
pub const NODE_CLASS_RECHECK: Duration = Duration::from_secs(5 * 60);
/// How soon a node class whose resolution met errors is tried again.
pub const NODE_CLASS_RETRY: Duration = Duration::from_secs(30);
/// Instances younger than this are not garbage: their NodeClaim may not be visible yet.
pub const GARBAGE_COLLECTION_GRACE: Duration = Duration::from_secs(30);

type OfferingKey = (String, String, String);

#[derive(Default)]
struct State {
    node_classes: BTreeMap<String, Arc<ResolvedNodeClass>>,
    /// (instance type, zone, capacity type) → unavailable until.
    unavailable: BTreeMap<OfferingKey, Timestamp>,
    types: Option<(Arc<TypeTable>, Timestamp)>,
    spot: Option<(Arc<SpotPrices>, Timestamp)>,
    /// Prices from the Price List API (empty: the built-in table's) and when to ask again.
    on_demand: Option<(Arc<OnDemandPrices>, Timestamp)>,
}

/// The AWS cloud provider.
pub struct AwsProvider {
    clients: AwsClients,
    settings: AwsSettings,
    clock: Arc<dyn Clock>,
    templates: LaunchTemplateCache,
    state: Mutex<State>,
    /// The interruption queue, once its URL was looked up.
    queue: Mutex<Option<InterruptionQueue>>,
}

/// One way to launch the claim.
#[derive(Debug, Clone)]
struct Candidate {
    instance_type: Arc<InstanceType>,
    zone: String,
    capacity_type: String,
    price: f64,
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

impl AwsProvider {
    pub fn new(clients: AwsClients, settings: AwsSettings, clock: Arc<dyn Clock>) -> AwsProvider {
        AwsProvider {
            clients,
            settings,
            clock,
            templates: LaunchTemplateCache::default(),
            state: Mutex::new(State::default()),
            queue: Mutex::new(None),
        }
    }

    pub fn clients(&self) -> &AwsClients {
        &self.clients
    }

    pub fn settings(&self) -> &AwsSettings {
        &self.settings
    }

    pub fn region(&self) -> &str {
        self.clients.region()
    }

    /// The launch templates this provider knows to exist.
    pub fn launch_templates(&self) -> &LaunchTemplateCache {
        &self.templates
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    // ---- node classes ----

    /// Reconciles a node class: resolves its subnets, security groups, AMIs and instance
    /// profile, validates them, and returns it with its new `status` (to be written back).
    /// Launches for it use what was resolved here.
    pub async fn reconcile_node_class(&self, node_class: &EC2NodeClass) -> ResolvedNodeClass {
        let resolved = nodeclass::reconcile(&self.clients, &self.settings, node_class, self.clock.now()).await;
        for e in &resolved.errors {
            tracing::warn!(node_class = node_class.name(), error = %e, "resolving EC2NodeClass");
        }
        self.lock().node_classes.insert(node_class.name().to_string(), Arc::new(resolved.clone()));
        resolved
    }

    /// Remembers a node class as its `status` says it resolved (e.g. after a restart, before
    /// the next reconciliation). Does nothing when it has no status.
    pub fn register_node_class(&self, node_class: &EC2NodeClass) {
        if let Some(r) = ResolvedNodeClass::from_status(node_class) {
            self.lock().node_classes.insert(node_class.name().to_string(), Arc::new(r));
        }
    }

    /// What the node class named `name` resolved to, if it was reconciled or registered.
    pub fn resolved(&self, name: &str) -> Option<Arc<ResolvedNodeClass>> {
        self.lock().node_classes.get(name).cloned()
    }

    /// Cleans up after a deleted node class: its launch templates and the instance profile
    /// kerf created for its role.
    pub async fn finalize_node_class(&self, node_class: &EC2NodeClass) -> Result<(), CloudError> {
        crate::launch::template::delete_for_node_class(
            &self.clients,
            &self.templates,
            &self.settings.cluster_name,
            node_class.name(),
        )
        .await?;
        nodeclass::instance_profile::delete(&self.clients, &self.settings, node_class).await?;
        self.lock().node_classes.remove(node_class.name());
        Ok(())
    }

    // ---- offerings ----

    /// Marks an offering out of capacity for [`INSUFFICIENT_CAPACITY_TTL`].
    pub fn mark_unavailable(&self, instance_type: &str, zone: &str, capacity_type: &str) {
        let until = add(self.clock.now(), INSUFFICIENT_CAPACITY_TTL);
        self.lock().unavailable.insert((instance_type.to_string(), zone.to_string(), capacity_type.to_string()), until);
    }

    /// Whether an offering is not known to be out of capacity now.
    pub fn is_offering_available(&self, instance_type: &str, zone: &str, capacity_type: &str) -> bool {
        let key = (instance_type.to_string(), zone.to_string(), capacity_type.to_string());
        self.lock().unavailable.get(&key).is_none_or(|until| *until <= self.clock.now())
    }

    /// Reads the region's instance types from EC2 now; when EC2 cannot be asked and nothing was
    /// read before, the built-in catalog stands in. Returns where the types came from.
    pub async fn refresh_instance_types(&self) -> Result<Source, CloudError> {
        let now = self.clock.now();
        let table = match instance_types::describe(&self.clients).await {
            Ok(t) if !t.types.is_empty() => t,
            result => {
                if let Err(e) = &result {
                    tracing::warn!(error = %e, "reading instance types; using the built-in catalog");
                }
                if let Some((table, _)) = &self.lock().types {
                    return Ok(table.source);
                }
                instance_types::from_catalog(self.region()).map_err(CloudError::Other)?
            }
        };
        let source = table.source;
        self.lock().types = Some((Arc::new(table), now));
        Ok(source)
    }

    /// Reads spot prices from DescribeSpotPriceHistory now. On failure the previous prices stay.
    pub async fn refresh_spot_prices(&self) -> Result<usize, CloudError> {
        let prices = instance_types::spot_prices(&self.clients).await?;
        let n = prices.len();
        self.lock().spot = Some((Arc::new(prices), self.clock.now()));
        Ok(n)
    }

    /// Reads on-demand prices from the Price List API now; returns how many types it priced.
    /// When it cannot answer, the prices read before stay (none: the built-in table prices)
    /// and it is asked again after [`ON_DEMAND_PRICES_RETRY`].
    pub async fn refresh_on_demand_prices(&self) -> Result<usize, CloudError> {
        let result = pricing::on_demand_prices(&self.clients, self.region()).await;
        let now = self.clock.now();
        let mut state = self.lock();
        match result {
            Ok(prices) => {
                let n = prices.len();
                state.on_demand = Some((Arc::new(prices), add(now, ON_DEMAND_PRICES_REFRESH)));
                Ok(n)
            }
            Err(e) => {
                let kept = state.on_demand.take().map(|(p, _)| p).unwrap_or_default();
                state.on_demand = Some((kept, add(now, ON_DEMAND_PRICES_RETRY)));
                Err(e.into())
            }
        }
    }

    /// The current spot price of an offering, if known.
    pub fn spot_price(&self, instance_type: &str, zone: &str) -> Option<f64> {
        let state = self.lock();
        state.spot.as_ref()?.0.get(&(instance_type.to_string(), zone.to_string())).copied()
    }

    async fn tables(&self) -> Result<(Arc<TypeTable>, Arc<SpotPrices>, Arc<OnDemandPrices>), CloudError> {
        let now = self.clock.now();
        let stale = |at: Timestamp, every: Duration| add(at, every) <= now;
        let types_due = self.lock().types.as_ref().is_none_or(|(_, at)| stale(*at, INSTANCE_TYPES_REFRESH));
        if types_due {
            self.refresh_instance_types().await?;
        }
        let (source, spot_due, on_demand_due) = {
            let state = self.lock();
            let source = state.types.as_ref().map(|(t, _)| t.source);
            (
                source,
                state.spot.as_ref().is_none_or(|(_, at)| stale(*at, SPOT_PRICES_REFRESH)),
                state.on_demand.as_ref().is_none_or(|(_, next)| *next <= now),
            )
        };
        if source == Some(Source::Ec2)
            && spot_due
            && let Err(e) = self.refresh_spot_prices().await
        {
            tracing::warn!(error = %e, "reading spot prices; keeping the previous ones");
        }
        if source == Some(Source::Ec2)
            && on_demand_due
            && let Err(e) = self.refresh_on_demand_prices().await
        {
            tracing::warn!(error = %e, "reading on-demand prices from the Price List API; the built-in table prices meanwhile");
        }
        let state = self.lock();
        let types = state
            .types
            .as_ref()
            .map(|(t, _)| t.clone())
            .ok_or_else(|| CloudError::Other("no instance types".into()))?;
        let spot = state.spot.as_ref().map(|(s, _)| s.clone()).unwrap_or_default();
        let on_demand = state.on_demand.as_ref().map(|(p, _)| p.clone()).unwrap_or_default();
        Ok((types, spot, on_demand))
    }

    /// The instance types a resolved node class can launch: sold in its subnets' zones, bootable
    /// by one of its AMIs, priced, with its kubelet settings, and out-of-capacity offerings marked
    /// unavailable.
    pub async fn instance_types_for(&self, resolved: &ResolvedNodeClass) -> Result<Vec<Arc<InstanceType>>, CloudError> {
        let (table, spot, on_demand) = self.tables().await?;
        let mut zones: Vec<String> = resolved.subnets.iter().map(|s| s.zone.clone()).collect();
        zones.sort();
        zones.dedup();
        let settings = NodeClassSettings::from_node_class(Some(&resolved.node_class));
        let built = instance_types::build(&table, self.region(), &zones, &settings, &spot, &on_demand)
            .map_err(CloudError::NodeClassNotReady)?;
        let now = self.clock.now();
        let state = self.lock();
        Ok(built
            .into_iter()
            .filter(|t| resolved.amis.iter().any(|a| a.fits(&t.labels)))
            .map(|mut t| {
                for o in &mut t.offerings {
                    let key = (t.name.clone(), o.zone.clone(), o.capacity_type.clone());
                    if state.unavailable.get(&key).is_some_and(|until| *until > now) {
                        o.available = false;
                    }
                }
                Arc::new(t)
            })
            .collect())
    }

    fn ready_node_class(&self, name: &str) -> Result<Arc<ResolvedNodeClass>, CloudError> {
        let resolved = self
            .resolved(name)
            .ok_or_else(|| CloudError::NodeClassNotReady(format!("EC2NodeClass {name} has not been reconciled")))?;
        if !resolved.is_ready() {
            return Err(CloudError::NodeClassNotReady(resolved.not_ready_reason()));
        }
        Ok(resolved)
    }

    // ---- launching ----

    /// The offerings `claim` may launch, by the launch rule ([`launch::choose`]): all of one
    /// capacity type, cheapest first, at most 60 instance types.
    fn candidates(&self, claim: &NodeClaim, types: &[Arc<InstanceType>]) -> Result<Vec<Candidate>, CloudError> {
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
        let mut chosen = Vec::new();
        for t in &fitting {
            for o in &t.offerings {
                if o.available && offering_allowed(&reqs, o) {
                    chosen.push(Candidate {
                        instance_type: Arc::clone(t),
                        zone: o.zone.clone(),
                        capacity_type: o.capacity_type.clone(),
                        price: o.price,
                    });
                }
            }
        }
        if launch::choose(&mut chosen).is_none() {
            return Err(CloudError::InsufficientCapacity(format!(
                "NodeClaim {}: every offering it allows is out of capacity",
                claim.name()
            )));
        }
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
        Ok(chosen)
    }

    /// The launch template for instances of `claim` booting `ami_id` with `capacity_type`.
    fn template_spec(
        &self,
        resolved: &ResolvedNodeClass,
        claim: &NodeClaim,
        ami_id: &str,
        capacity_type: &str,
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
        })
    }

    async fn launch(&self, claim: &NodeClaim) -> Result<NodeClaim, CloudError> {
        let class_name = claim.spec.node_class_ref.name.clone();
        let resolved = self.ready_node_class(&class_name)?;
        let nc = &resolved.node_class;
        let node_pool =
            claim.metadata.labels.as_ref().and_then(|l| l.get(labels::NODE_POOL)).cloned().ok_or_else(|| {
                CloudError::Invalid(format!("NodeClaim {} has no {} label", claim.name(), labels::NODE_POOL))
            })?;
        let types = self.instance_types_for(&resolved).await?;
        let mut candidates = self.candidates(claim, &types)?;
        let instance_tags = tags::instance_tags(&self.settings, nc, &node_pool, claim.name());

        let mut failures: Vec<String> = Vec::new();
        for _attempt in 0..MAX_FLEET_ATTEMPTS {
            if candidates.is_empty() {
                break;
            }
            let capacity_type = candidates[0].capacity_type.clone();
            // One launch template per AMI; each type boots the newest AMI it can.
            let mut overrides = Vec::new();
            let mut templates: BTreeMap<String, String> = BTreeMap::new();
            for c in &candidates {
                let Some(ami) = resolved.amis.iter().find(|a| a.fits(&c.instance_type.labels)) else { continue };
                let Some(subnet) = resolved.subnets.iter().find(|s| s.zone == c.zone) else { continue };
                let lt = match templates.get(&ami.id) {
                    Some(name) => name.clone(),
                    None => {
                        let spec = self.template_spec(&resolved, claim, &ami.id, &capacity_type)?;
                        let name = self.templates.ensure(&self.clients, &spec).await?;
                        templates.insert(ami.id.clone(), name.clone());
                        name
                    }
                };
                overrides.push(Override {
                    instance_type: c.instance_type.name.clone(),
                    zone: c.zone.clone(),
                    subnet_id: subnet.id.clone(),
                    launch_template: lt,
                    price: c.price,
                });
            }
            if overrides.is_empty() {
                break;
            }
            let result = match fleet::create_fleet(&self.clients, &capacity_type, &overrides, &instance_tags).await {
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
                    let chosen = candidates
                        .iter()
                        .find(|c| c.instance_type.name == l.instance_type && c.zone == l.zone)
                        .or_else(|| candidates.iter().find(|c| c.instance_type.name == l.instance_type))
                        .cloned()
                        .ok_or_else(|| {
                            CloudError::Other(format!(
                                "CreateFleet launched {} which kerf did not ask for",
                                l.instance_type
                            ))
                        })?;
                    let image =
                        resolved.amis.iter().find(|a| a.fits(&chosen.instance_type.labels)).map(|a| a.id.clone());
                    return Ok(self.launched_claim(claim, nc, &chosen, &l, image));
                }
                FleetResult::NotLaunched { unavailable, errors } => {
                    for (t, z) in &unavailable {
                        self.mark_unavailable(t, z, &capacity_type);
                        failures.push(format!("{t}/{z}/{capacity_type}"));
                    }
                    if !errors.is_empty() && unavailable.is_empty() {
                        return Err(CloudError::Other(format!(
                            "NodeClaim {}: CreateFleet failed: {}",
                            claim.name(),
                            errors.join("; ")
                        )));
                    }
                    candidates.retain(|c| !unavailable.iter().any(|(t, z)| *t == c.instance_type.name && *z == c.zone));
                }
            }
        }
        Err(CloudError::InsufficientCapacity(format!(
            "NodeClaim {}: no capacity for {}",
            claim.name(),
            if failures.is_empty() { "any offering it allows".to_string() } else { failures.join(", ") }
        )))
    }

    fn launched_claim(
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

    // ---- instances ----

    /// Capacity and allocatable of an instance type for a node class, for describing instances.
    async fn type_shape(&self, instance_type: &str, node_class: Option<&str>) -> Option<Arc<InstanceType>> {
        let resolved = node_class.and_then(|n| self.resolved(n))?;
        self.instance_types_for(&resolved).await.ok()?.into_iter().find(|t| t.name == instance_type)
    }

    async fn describe_claim(&self, i: &Ec2Instance) -> NodeClaim {
        let shape = self.type_shape(&i.instance_type, i.tags.get(labels::AWS_EC2_NODE_CLASS).map(String::as_str)).await;
        let labels = shape.as_ref().map(|t| t.labels.clone()).or_else(|| {
            let info = kerf_cloud::aws::catalog().ok()?.type_info(&i.instance_type)?;
            Some(kerf_cloud::aws::catalog::type_labels(info))
        });
        let allocatable = shape.as_ref().map(|t| t.allocatable());
        let capacity = shape.as_ref().zip(allocatable.as_ref()).map(|(t, a)| (&t.capacity, a));
        i.to_node_claim(self.region(), labels.as_ref(), capacity)
    }

    /// The live instance behind a provider ID, only if it is this cluster's.
    async fn owned_instance(&self, provider_id: &str) -> Result<Ec2Instance, CloudError> {
        let id = instances::parse_provider_id(provider_id)?;
        let instance = instances::describe(&self.clients, &id)
            .await?
            .filter(Ec2Instance::is_live)
            .ok_or_else(|| CloudError::NotFound(provider_id.to_string()))?;
        if !instance.is_owned_by(&self.settings.cluster_name) {
            tracing::warn!(instance = %id, cluster = %self.settings.cluster_name, "instance is not tagged for this cluster; not touching it");
            return Err(CloudError::NotFound(provider_id.to_string()));
        }
        Ok(instance)
    }

    /// The interruption queue of `settings.interruptionQueue`, looked up once; `None` when no
    /// queue is configured.
    async fn interruption_queue(&self) -> Result<Option<InterruptionQueue>, CloudError> {
        let Some(name) = &self.settings.interruption_queue else { return Ok(None) };
        if let Some(q) = self.queue.lock().unwrap_or_else(|e| e.into_inner()).clone() {
            return Ok(Some(q));
        }
        let q = InterruptionQueue::new(self.clients.clone(), name).await?;
        *self.queue.lock().unwrap_or_else(|e| e.into_inner()) = Some(q.clone());
        Ok(Some(q))
    }

    /// The notices of one queue event, for the instances of it this cluster owns. A reclaimed
    /// spot offering is marked unavailable (its capacity is gone for a while).
    async fn notices_of(&self, event: &InterruptionEvent) -> Result<Vec<InterruptionNotice>, CloudError> {
        let mut out = Vec::new();
        for id in &event.instance_ids {
            let Some(instance) = instances::describe(&self.clients, id).await? else {
                tracing::debug!(instance = %id, kind = %event.kind, "interruption event for an unknown instance");
                continue;
            };
            if !instance.is_owned_by(&self.settings.cluster_name) {
                tracing::debug!(instance = %id, kind = %event.kind, "interruption event for an instance of another cluster");
                continue;
            }
            if event.kind == InterruptionKind::SpotInterruption {
                self.mark_unavailable(&instance.instance_type, &instance.zone, labels::CAPACITY_TYPE_SPOT);
            }
            let terminates_at = match event.kind {
                InterruptionKind::SpotInterruption => {
                    event.time.parse::<Timestamp>().ok().map(|t| add(t, SPOT_INTERRUPTION_NOTICE))
                }
                _ => None,
            };
            out.push(InterruptionNotice {
                provider_id: instance.provider_id(),
                kind: event.kind.clone(),
                terminates_at,
            });
        }
        Ok(out)
    }

    /// Instances of this cluster that none of `known_provider_ids` accounts for and that were
    /// launched more than [`GARBAGE_COLLECTION_GRACE`] ago: what garbage collection deletes.
    pub async fn orphaned(&self, known_provider_ids: &BTreeSet<String>) -> Result<Vec<NodeClaim>, CloudError> {
        let now = self.clock.now();
        let mut out = Vec::new();
        for i in instances::list_owned(&self.clients, &self.settings.cluster_name).await? {
            if known_provider_ids.contains(&i.provider_id()) {
                continue;
            }
            if i.launch_time.is_some_and(|t| add(t, GARBAGE_COLLECTION_GRACE) > now) {
                continue;
            }
            out.push(self.describe_claim(&i).await);
        }
        Ok(out)
    }
}

impl CloudProvider for AwsProvider {
    async fn create(&self, claim: &NodeClaim) -> Result<NodeClaim, CloudError> {
        self.launch(claim).await
    }

    async fn delete(&self, claim: &NodeClaim) -> Result<(), CloudError> {
        let pid = claim.provider_id().ok_or_else(|| CloudError::NotFound(format!("NodeClaim {}", claim.name())))?;
        let instance = self.owned_instance(pid).await?;
        instances::terminate(&self.clients, &instance.id).await?;
        Ok(())
    }

    /// EC2 RebootInstances on the claim's instance, only if it is this cluster's and live.
    async fn reboot(&self, claim: &NodeClaim) -> Result<(), CloudError> {
        let pid = claim.provider_id().ok_or_else(|| CloudError::NotFound(format!("NodeClaim {}", claim.name())))?;
        let instance = self.owned_instance(pid).await?;
        match instances::reboot(&self.clients, &instance.id).await {
            Ok(()) => Ok(()),
            Err(e) if e.is_not_found() => Err(CloudError::NotFound(pid.to_string())),
            Err(e) => Err(e.into()),
        }
    }

    async fn get(&self, provider_id: &str) -> Result<NodeClaim, CloudError> {
        let instance = self.owned_instance(provider_id).await?;
        Ok(self.describe_claim(&instance).await)
    }

    async fn list(&self) -> Result<Vec<Arc<NodeClaim>>, CloudError> {
        let mut out = Vec::new();
        for i in instances::list_owned(&self.clients, &self.settings.cluster_name).await? {
            out.push(Arc::new(self.describe_claim(&i).await));
        }
        Ok(out)
    }

    async fn instance_types(
        &self,
        node_pool: &NodePool,
        node_class: Option<&EC2NodeClass>,
    ) -> Result<Vec<Arc<InstanceType>>, CloudError> {
        let Some(nc) = node_class else {
            return Err(CloudError::NodeClassNotReady(format!(
                "NodePool {}: its EC2NodeClass does not exist",
                node_pool.name()
            )));
        };
        // The node class as the cluster has it (its status written by a reconciliation), else
        // as this provider last resolved it.
        let resolved = match ResolvedNodeClass::from_status(nc) {
            Some(r) => Arc::new(r),
            None => self.ready_node_class(nc.name())?,
        };
        if !resolved.is_ready() {
            return Err(CloudError::NodeClassNotReady(resolved.not_ready_reason()));
        }
        self.instance_types_for(&resolved).await
    }

    /// Resolves the node class against EC2, SSM and IAM (see [`AwsProvider::reconcile_node_class`]);
    /// a resolution that met errors is tried again sooner than a clean one.
    async fn resolve_node_class(
        &self,
        node_class: &EC2NodeClass,
    ) -> Result<kerf_cloud::NodeClassResolution, CloudError> {
        let r = self.reconcile_node_class(node_class).await;
        let recheck = if r.errors.is_empty() { NODE_CLASS_RECHECK } else { NODE_CLASS_RETRY };
        Ok(kerf_cloud::NodeClassResolution { status: r.status().clone(), recheck_after: Some(recheck) })
    }

    async fn is_drifted(
        &self,
        claim: &NodeClaim,
        node_class: Option<&EC2NodeClass>,
    ) -> Result<Option<String>, CloudError> {
        let Some(nc) = node_class else { return Ok(None) };
        if let Some(drift) = kerf_cloud::provider::node_class_hash_drift(claim, nc) {
            return Ok(Some(drift));
        }
        let Some(status) = &nc.status else { return Ok(None) };
        if let Some(image) = claim.status.as_ref().and_then(|s| s.image_id.as_ref())
            && !status.amis.is_empty()
            && !status.amis.iter().any(|a| &a.id == image)
        {
            return Ok(Some("AMIDrift".to_string()));
        }
        let Some(pid) = claim.provider_id() else { return Ok(None) };
        let instance = match self.owned_instance(pid).await {
            Ok(i) => i,
            Err(CloudError::NotFound(_)) => return Ok(None),
            Err(e) => return Err(e),
        };
        if let Some(subnet) = &instance.subnet_id
            && !status.subnets.is_empty()
            && !status.subnets.iter().any(|s| &s.id == subnet)
        {
            return Ok(Some("SubnetDrift".to_string()));
        }
        let mut have: Vec<&String> = instance.security_group_ids.iter().collect();
        let mut want: Vec<&String> = status.security_groups.iter().map(|g| &g.id).collect();
        have.sort();
        want.sort();
        if !want.is_empty() && have != want {
            return Ok(Some("SecurityGroupDrift".to_string()));
        }
        Ok(None)
    }

    /// Reads the interruption queue (without waiting). Each event's message is deleted once its
    /// notices are handed out; an event whose instances cannot be looked up stays in the queue
    /// and comes back after its visibility timeout.
    async fn interruptions(&self) -> Result<Vec<InterruptionNotice>, CloudError> {
        let Some(queue) = self.interruption_queue().await? else { return Ok(Vec::new()) };
        let mut out = Vec::new();
        for event in queue.receive(0).await? {
            match self.notices_of(&event).await {
                Ok(notices) => {
                    out.extend(notices);
                    queue.delete(&event).await?;
                }
                Err(e) => {
                    tracing::warn!(event = %event.id, kind = %event.kind, error = %e, "interruption event left in the queue");
                }
            }
        }
        Ok(out)
    }

    fn name(&self) -> &'static str {
        "aws"
    }
}

#[cfg(test)]
mod tests {
    use kerf_api::Offering;
    use kerf_api::{Quantity, ResourceList};

    use super::*;

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
