//! [`AwsProvider`]: kerf's [`CloudProvider`] over EC2. It keeps what it resolved per node class,
//! the launch templates it made, the region's instance types, on-demand and spot prices
//! (each refreshed on its own schedule), the offerings that recently had no capacity, the room
//! left in the capacity reservations its classes selected, and the cluster's NodeOverlays, which
//! price (and extend) every type it hands out or launches (`kerf_api::overlay`).

mod blocks;
mod launching;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use kerf_api::overlay::NodeOverlays;
use kerf_api::{EC2NodeClass, InstanceType, NodeClaim, NodePool, labels};
use kerf_cloud::aws::NodeClassSettings;
use kerf_cloud::clock::add;
use kerf_cloud::{Clock, CloudError, CloudProvider, InterruptionKind, InterruptionNotice, Timestamp};

use crate::AwsClients;
use crate::instance_types::{self, Source, SpotPrices, TypeTable};
use crate::instances::{self, Ec2Instance};
use crate::interruption::{InterruptionEvent, InterruptionQueue};
use crate::launch::template::LaunchTemplateCache;
use crate::nodeclass::{self, ResolvedNodeClass};
use crate::pricing::{self, OnDemandPrices};
use crate::settings::AwsSettings;

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
/// How long the room EC2 reported in a capacity reservation is used before it is described
/// again (a launch into it, or a reservation found full, changes it meanwhile).
pub const RESERVATIONS_REFRESH: Duration = Duration::from_secs(60);
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
    /// Capacity reservation id → (instances it can still take, when EC2 last described it).
    reservation_room: BTreeMap<String, (u32, Timestamp)>,
    /// The cluster's NodeOverlays (none until the controller hands them over).
    overlays: Arc<NodeOverlays>,
    /// Provider IDs of the live instances warned that their capacity block ends.
    block_warned: BTreeSet<String>,
    /// Karpenter's `ReservedCapacity` gate turned off: no reservation is selected or drifts.
    reserved_capacity_off: bool,
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
        let now = self.clock.now();
        let reserved_capacity = !self.lock().reserved_capacity_off;
        let resolved = nodeclass::reconcile(&self.clients, &self.settings, node_class, now, reserved_capacity).await;
        for e in &resolved.errors {
            tracing::warn!(node_class = node_class.name(), error = %e, "resolving EC2NodeClass");
        }
        let mut state = self.lock();
        for r in &resolved.reservations {
            state.reservation_room.insert(r.id.clone(), (r.available, now));
        }
        state.node_classes.insert(node_class.name().to_string(), Arc::new(resolved.clone()));
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

    /// The NodeOverlays in force.
    pub fn node_overlays(&self) -> Arc<NodeOverlays> {
        Arc::clone(&self.lock().overlays)
    }

    /// The instance types a resolved node class offers as seen from `context` (a NodePool's or
    /// a NodeClaim's labels, see `kerf_api::overlay`): [`AwsProvider::instance_types_for`] with
    /// the NodeOverlays applied, then a `reserved` offering per capacity reservation the class
    /// selected, with the room it has left (reservations keep their own price: prepaid), unless
    /// the `ReservedCapacity` gate is off.
    pub async fn offered_types(
        &self,
        resolved: &ResolvedNodeClass,
        context: &BTreeMap<String, String>,
    ) -> Result<Vec<Arc<InstanceType>>, CloudError> {
        let types = self.instance_types_for(resolved).await?;
        let overlays = self.node_overlays();
        let types = if overlays.is_empty() { types } else { overlays.apply_all(&types, context) };
        let reservations = &resolved.status().capacity_reservations;
        if reservations.is_empty() || self.lock().reserved_capacity_off {
            return Ok(types);
        }
        self.refresh_reservation_room(reservations).await;
        let state = self.lock();
        let room = |id: &str| state.reservation_room.get(id).map_or(0, |(n, _)| *n);
        Ok(crate::reservations::with_offerings(types, reservations, room, self.clock.now()))
    }

    /// Describes again the reservations whose room was read more than [`RESERVATIONS_REFRESH`]
    /// ago (or never). One that is no longer active has no room; when EC2 cannot answer, the
    /// room read before stays.
    async fn refresh_reservation_room(&self, reservations: &[kerf_api::ec2nodeclass::CapacityReservationStatus]) {
        let now = self.clock.now();
        let due: Vec<String> = {
            let state = self.lock();
            reservations
                .iter()
                .filter(|r| {
                    state.reservation_room.get(&r.id).is_none_or(|(_, at)| add(*at, RESERVATIONS_REFRESH) <= now)
                })
                .map(|r| r.id.clone())
                .collect()
        };
        if due.is_empty() {
            return;
        }
        match crate::reservations::describe_ids(&self.clients, &due).await {
            Ok(found) => {
                let mut state = self.lock();
                for id in &due {
                    let room = found.iter().find(|r| r.id == *id).map_or(0, |r| r.available);
                    state.reservation_room.insert(id.clone(), (room, now));
                }
            }
            Err(e) => tracing::warn!(error = %e, "reading capacity reservations; keeping the room read before"),
        }
    }

    /// Whether Karpenter's `ReservedCapacity` gate is on (see `CloudProvider::set_reserved_capacity`).
    pub fn reserved_capacity(&self) -> bool {
        !self.lock().reserved_capacity_off
    }

    /// The room left in a capacity reservation, as kerf last knew it.
    pub fn reservation_room(&self, id: &str) -> Option<u32> {
        self.lock().reservation_room.get(id).map(|(n, _)| *n)
    }

    /// A launch found the reservation full: it is offered as unavailable until it is described
    /// again.
    fn reservation_exhausted(&self, id: &str) {
        if let Some((room, _)) = self.lock().reservation_room.get_mut(id) {
            *room = 0;
        }
    }

    /// An instance launched into the reservation: one less until it is described again.
    fn took_from_reservation(&self, id: &str) {
        if let Some((room, _)) = self.lock().reservation_room.get_mut(id) {
            *room = room.saturating_sub(1);
        }
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
        // Without the gate Karpenter reads no instance as reserved, whichever reservation EC2
        // put it in (its launches then leave EC2 its `open` default).
        if !self.reserved_capacity() && i.capacity_reservation_id.is_some() {
            let mut plain = i.clone();
            plain.capacity_type = labels::CAPACITY_TYPE_ON_DEMAND.to_string();
            plain.capacity_reservation_id = None;
            plain.capacity_reservation_type = None;
            return plain.to_node_claim(self.region(), labels.as_ref(), capacity);
        }
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
                // Both give two minutes' notice.
                InterruptionKind::SpotInterruption | InterruptionKind::CapacityReservationInterruption => {
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
        self.offered_types(&resolved, &kerf_api::overlay::pool_context(node_pool)).await
    }

    /// Resolves the node class against EC2, SSM and IAM (see [`AwsProvider::reconcile_node_class`]);
    /// a resolution that met errors is tried again sooner than a clean one.
    async fn resolve_node_class(
        &self,
        node_class: &EC2NodeClass,
    ) -> Result<kerf_cloud::NodeClassResolution, CloudError> {
        let r = self.reconcile_node_class(node_class).await;
        let recheck = if r.errors.is_empty() { NODE_CLASS_RECHECK } else { NODE_CLASS_RETRY };
        // A capacity block that starts draining is resolved again then (its status reads expiring).
        let closing = crate::reservations::next_closing(&r.status().capacity_reservations, self.clock.now());
        let recheck = closing.map_or(recheck, |d| recheck.min(d));
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
        if !self.lock().reserved_capacity_off
            && let Some(drift) = kerf_cloud::sim::reservations::reservation_drift(claim, nc)
        {
            return Ok(Some(drift));
        }
        let Some(status) = &nc.status else { return Ok(None) };
        if let Some(drift) = kerf_cloud::provider::ami_drift(claim, nc) {
            return Ok(Some(drift));
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

    /// The instances whose capacity block ends soon (see `provider/blocks.rs`), then the
    /// interruption queue (read without waiting). Each event's message is deleted once its
    /// notices are handed out; an event whose instances cannot be looked up stays in the queue
    /// and comes back after its visibility timeout.
    async fn interruptions(&self) -> Result<Vec<InterruptionNotice>, CloudError> {
        let mut out = match self.block_ending_notices().await {
            Ok(n) => n,
            Err(e) => {
                tracing::warn!(error = %e, "looking for instances in capacity blocks that end soon");
                Vec::new()
            }
        };
        let Some(queue) = self.interruption_queue().await? else { return Ok(out) };
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

    /// Every type handed out or launched from now on is priced and extended by `overlays`.
    fn set_node_overlays(&self, overlays: Arc<NodeOverlays>) {
        self.lock().overlays = overlays;
    }

    fn set_reserved_capacity(&self, enabled: bool) {
        self.lock().reserved_capacity_off = !enabled;
    }

    fn name(&self) -> &'static str {
        "aws"
    }
}
