//! [`SimProvider`]: a cloud that launches instances in virtual time.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use kerf_api::ec2nodeclass::{AmiStatus, EC2NodeClassSpec, EC2NodeClassStatus};
use kerf_api::launch::{self, offering_allowed, type_meets};
use kerf_api::nodeclaim::NodeClaimStatus;
use kerf_api::{EC2NodeClass, NodeClaim, NodePool, labels};
use kerf_api::{InstanceType, Offering, Requirements};

use super::config::{InstanceTypesSource, SimConfig, SimConfigError};
use super::reservations::CapacityReservation;
use super::spot_market::{MAX_CHANGE, SpotMarket};
use crate::aws::{Catalog, NodeClassSettings, catalog};
use crate::clock::{Clock, Timestamp, add};
use crate::provider::{CloudError, CloudProvider, InterruptionKind, InterruptionNotice, NodeClassResolution};

mod overlays;
mod reserved;

/// How long an offering that failed with insufficient capacity stays unavailable (as Karpenter's
/// insufficient-capacity cache).
pub const ICE_CACHE_TTL: Duration = Duration::from_secs(3 * 60);

/// How long after a spot interruption warning EC2 reclaims the instance.
pub const SPOT_RECLAIM_AFTER: Duration = Duration::from_secs(2 * 60);

/// One instance the simulated cloud launched.
#[derive(Debug, Clone, PartialEq)]
pub struct SimInstance {
    /// `aws:///us-west-2a/i-0000000000000001`.
    pub provider_id: String,
    /// `i-0000000000000001`.
    pub instance_id: String,
    /// The private DNS name the Node registers as: `ip-10-0-0-2.us-west-2.compute.internal`.
    pub node_name: String,
    /// The NodeClaim it was launched for.
    pub node_claim: String,
    pub instance_type: Arc<InstanceType>,
    pub zone: String,
    pub capacity_type: String,
    /// $/h of the offering it was launched from, after NodeOverlays.
    pub price: f64,
    /// $/h the cloud lists that offering at (equal to `price` unless an overlay changed it).
    pub list_price: f64,
    /// The NodeOverlays that apply to it (the one that set its price, those that added
    /// capacity), in precedence order.
    pub overlays: Vec<String>,
    /// Labels its Node should carry: the claim's, the type's, zone, region, capacity type
    /// (shared: listing instances does not copy them).
    pub labels: Arc<BTreeMap<String, String>>,
    pub launched_at: Timestamp,
    /// When the Node is registered and Ready: `launched_at + launchLatency`.
    pub ready_at: Timestamp,
    /// Deleted, or reclaimed after a spot interruption.
    pub terminated: bool,
    pub terminated_at: Option<Timestamp>,
    /// When a spot interruption warning was sent for it.
    pub interrupted_at: Option<Timestamp>,
    /// When it was last rebooted ([`SimProvider::reboot_instance`]): it is down from then for the launch
    /// latency.
    pub rebooted_at: Option<Timestamp>,
    /// The capacity reservation it runs in, if any.
    pub capacity_reservation: Option<String>,
    /// When EC2 takes it back whatever happens (a capacity block's instance, ahead of the block's
    /// end).
    pub reclaim_at: Option<Timestamp>,
}

/// An instance running before the simulation began, as [`SimProvider::adopt`] takes it over.
#[derive(Debug, Clone, PartialEq)]
pub struct ExistingInstance {
    pub provider_id: String,
    pub node_name: String,
    /// Its NodeClaim (metadata and spec; the status is filled in).
    pub claim: NodeClaim,
    /// From the node's `node.kubernetes.io/instance-type` label.
    pub instance_type: Option<String>,
    pub zone: String,
    pub capacity_type: String,
    pub capacity: kerf_api::ResourceList,
    pub allocatable: kerf_api::ResourceList,
    /// The node's labels.
    pub labels: BTreeMap<String, String>,
}

/// An interruption notice the cloud sent for an instance: a spot interruption warning (the
/// instance is reclaimed [`SPOT_RECLAIM_AFTER`] later), or a rebalance recommendation, state
/// change or scheduled change (see [`SimProvider::notify`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Interruption {
    pub provider_id: String,
    pub node_name: String,
    pub node_claim: String,
    pub capacity_type: String,
    pub kind: InterruptionKind,
    /// When the notice was sent.
    pub at: Timestamp,
    /// When EC2 reclaims the instance (spot interruptions only).
    pub reclaim_at: Option<Timestamp>,
}

type OfferingKey = (String, String, String);

/// Instance types shared between calls.
pub type SharedTypes = Arc<Vec<Arc<InstanceType>>>;

struct Launched {
    instance: SimInstance,
    claim: Arc<NodeClaim>,
    /// Its offering's price before the spot market moved it ($/h): what a move of the market
    /// reprices a running spot instance from.
    model_price: f64,
}

#[derive(Default)]
struct State {
    launched: u64,
    instances: Vec<Launched>,
    /// Offering (type, zone, capacity type) → when it becomes available again.
    ice: BTreeMap<OfferingKey, Timestamp>,
    interruptions: Vec<Interruption>,
    /// Node class name → its settings, as last seen by `instance_types` / `register_node_class`.
    node_classes: BTreeMap<String, NodeClassSettings>,
    /// Node class name → (settings, types built for them), before availability is applied.
    types: BTreeMap<String, (NodeClassSettings, SharedTypes)>,
    /// Adopted instances whose price the cloud does not know: provider ID → why.
    unpriced: BTreeMap<String, String>,
    /// Node names of adopted instances, which launches do not reuse.
    adopted_names: std::collections::BTreeSet<String>,
    /// Node class name → the spec and status a real cluster recorded for it (a snapshot's), the
    /// account's answer while the class keeps that spec.
    recorded: BTreeMap<String, (EC2NodeClassSpec, EC2NodeClassStatus)>,
    /// Node class name → where its instances can go, as its last resolution said.
    reach: BTreeMap<String, Reach>,
    /// Node class name → the images its last resolution found (see `images`).
    images: BTreeMap<String, Vec<kerf_api::ec2nodeclass::AmiStatus>>,
    /// Node class name → (the types at market prices, the reach, those of them within reach).
    reached: BTreeMap<String, (SharedTypes, Reach, SharedTypes)>,
    /// Spot prices as the market last moved them; `None`: the model prices.
    market: Option<SpotMarket>,
    /// Node class name → (its types at model prices, the same at market prices); emptied when
    /// the market moves.
    priced: BTreeMap<String, (SharedTypes, SharedTypes)>,
    /// Node class name → the ids of the capacity reservations its last resolution selected.
    reservations: BTreeMap<String, Vec<String>>,
    /// Karpenter's `ReservedCapacity` gate turned off: no reservation is selected or drifts.
    reserved_capacity_off: bool,
    /// Reading capacity reservations fails with this error (see
    /// [`SimProvider::fail_reservation_reads`]).
    reservation_read_error: Option<String>,
    /// Capacity block instances warned that the block ends (provider IDs).
    block_warned: std::collections::BTreeSet<String>,
    /// Capacity reservation id → the NodeClaims whose instances the caller found in it elsewhere
    /// (see [`SimProvider::set_reservation_usage`]), counted with this provider's own launches.
    reservation_usage: BTreeMap<String, std::collections::BTreeSet<String>>,
    /// The cluster's NodeOverlays, as last set.
    overlays: Arc<kerf_api::overlay::NodeOverlays>,
    /// Types as overlays change them, per node class and context (see `overlays`).
    overlaid: overlays::OverlaidCache,
}

/// A simulated EC2: the built-in catalog (or custom types), launch latency, insufficient
/// capacity with Karpenter's 3-minute cache, deterministic instance IDs and names, and spot
/// interruption warnings. Time comes from the clock it is given.
pub struct SimProvider {
    config: SimConfig,
    zones: Vec<String>,
    clock: Arc<dyn Clock>,
    /// Custom types, built once (they do not depend on the node class).
    custom: Option<SharedTypes>,
    state: Mutex<State>,
    /// The instant of t=0, from which capacity reservations' start and end count.
    epoch: Timestamp,
    /// Node class name → the resourceVersion last seen and the hash of that version's spec.
    class_hashes: Mutex<BTreeMap<String, (Option<String>, String)>>,
}

impl SimProvider {
    /// A simulated cloud as `config` describes it. Fails (naming the field) when the config is
    /// invalid or names a region, zone or instance type the catalog does not have.
    pub fn new(config: SimConfig, clock: Arc<dyn Clock>) -> Result<SimProvider, SimConfigError> {
        config.validate()?;
        let cat = catalog().map_err(|e| SimConfigError::new("instanceTypes", e.to_string()))?;
        let region = config.region.as_str();
        let catalog_zones = cat.zones(region).ok();
        let zones = match (&config.zones, catalog_zones) {
            (Some(z), _) => z.clone(),
            (None, Some(z)) => z.to_vec(),
            (None, None) => {
                return Err(SimConfigError::new(
                    "zones",
                    format!("required: the built-in catalog does not cover region {region}"),
                ));
            }
        };
        let custom = match &config.instance_types {
            InstanceTypesSource::Aws => {
                let known = cat.zones(region).map_err(|e| SimConfigError::new("region", e.to_string()))?;
                for (i, z) in zones.iter().enumerate() {
                    if !known.contains(z) {
                        return Err(SimConfigError::new(
                            format!("zones[{i}]"),
                            format!("the built-in catalog sells nothing in zone {z} (it has {})", known.join(", ")),
                        ));
                    }
                }
                None
            }
            InstanceTypesSource::Custom(types) => {
                for (i, t) in types.iter().enumerate() {
                    for (j, o) in t.offerings.iter().flatten().enumerate() {
                        if !zones.contains(&o.zone) {
                            return Err(SimConfigError::new(
                                format!("instanceTypes[{i}].offerings[{j}].zone"),
                                format!("zone {:?} is not one of the cloud's zones ({})", o.zone, zones.join(", ")),
                            ));
                        }
                    }
                }
                Some(Arc::new(super::custom::build_custom(&config, &zones)))
            }
        };
        for (i, u) in config.unavailable.iter().enumerate() {
            let known = match &custom {
                Some(types) => types.iter().any(|t| t.name == u.instance_type),
                None => cat.offers(region).is_ok_and(|o| o.iter().any(|o| o.instance_type == u.instance_type)),
            };
            if !known {
                return Err(SimConfigError::new(
                    format!("unavailable[{i}].instanceType"),
                    format!("unknown instance type {:?} in region {region}", u.instance_type),
                ));
            }
            if let Some(z) = &u.zone
                && !zones.contains(z)
            {
                return Err(SimConfigError::new(
                    format!("unavailable[{i}].zone"),
                    format!("zone {z:?} is not one of the cloud's zones ({})", zones.join(", ")),
                ));
            }
        }
        for (i, r) in config.capacity_reservations.iter().enumerate() {
            let known = match &custom {
                Some(types) => types.iter().any(|t| t.name == r.instance_type),
                None => cat.offers(region).is_ok_and(|o| o.iter().any(|o| o.instance_type == r.instance_type)),
            };
            if !known {
                return Err(SimConfigError::new(
                    format!("capacityReservations[{i}].instanceType"),
                    format!("unknown instance type {:?} in region {region}", r.instance_type),
                ));
            }
            if !zones.contains(&r.zone) {
                return Err(SimConfigError::new(
                    format!("capacityReservations[{i}].zone"),
                    format!("zone {:?} is not one of the cloud's zones ({})", r.zone, zones.join(", ")),
                ));
            }
        }
        let epoch = clock.now();
        Ok(SimProvider {
            config,
            zones,
            epoch,
            clock,
            custom,
            state: Mutex::new(State::default()),
            class_hashes: Mutex::new(BTreeMap::new()),
        })
    }

    pub fn config(&self) -> &SimConfig {
        &self.config
    }

    pub fn region(&self) -> &str {
        &self.config.region
    }

    /// The zones this cloud has.
    pub fn zones(&self) -> &[String] {
        &self.zones
    }

    pub fn launch_latency(&self) -> Duration {
        self.config.launch_latency.as_duration()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic elsewhere cannot leave the state half-updated in a way that matters here.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Remembers a node class so that claims referring to it launch with its kubelet settings.
    pub fn register_node_class(&self, node_class: &EC2NodeClass) {
        let settings = NodeClassSettings::from_node_class(Some(node_class));
        self.lock().node_classes.insert(node_class.name().to_string(), settings);
    }

    /// The instance types for `settings`, built once per node class, all offerings available.
    fn base_types(
        &self,
        state: &mut State,
        key: &str,
        settings: &NodeClassSettings,
    ) -> Result<SharedTypes, CloudError> {
        if let Some(custom) = &self.custom {
            return Ok(custom.clone());
        }
        if let Some((s, types)) = state.types.get(key)
            && s == settings
        {
            return Ok(types.clone());
        }
        let cat: &Catalog = catalog().map_err(|e| CloudError::Other(e.to_string()))?;
        let built = cat
            .instance_types(&self.config.region, Some(&self.zones), settings)
            .map_err(|e| CloudError::NodeClassNotReady(e.to_string()))?;
        let types = Arc::new(built.into_iter().map(Arc::new).collect::<Vec<_>>());
        state.types.insert(key.to_string(), (settings.clone(), types.clone()));
        Ok(types)
    }

    /// Takes the status a real cluster recorded for `node_class` (its subnets, security groups,
    /// images and instance profile; a `kerf snapshot` keeps them) as what the account holds for
    /// it, for as long as the class keeps this spec. A status without any of them records nothing.
    pub fn record_node_class_status(&self, node_class: &EC2NodeClass) {
        let Some(status) = node_class.status.as_ref().and_then(EC2NodeClassStatus::resolved) else { return };
        self.lock().recorded.insert(node_class.name().to_string(), (node_class.spec.clone(), status));
    }

    /// The types for `settings` at model prices and at market prices (the same types when the
    /// market has not moved).
    fn types_now(
        &self,
        state: &mut State,
        key: &str,
        settings: &NodeClassSettings,
    ) -> Result<(SharedTypes, SharedTypes), CloudError> {
        let model = self.base_types(state, key, settings)?;
        let Some(market) = state.market else { return Ok((model.clone(), model)) };
        if let Some((m, priced)) = state.priced.get(key)
            && Arc::ptr_eq(m, &model)
        {
            return Ok((model, priced.clone()));
        }
        let priced = Arc::new(market.reprice(&model));
        state.priced.insert(key.to_string(), (model.clone(), priced.clone()));
        Ok((model, priced))
    }

    /// `types` (a class's, at market prices) narrowed to where the class's instances can go: the
    /// zones of its subnets and the types one of its images boots, as the EC2 provider narrows
    /// them. Unresolved classes, and classes that reach every zone and type, get `types` as is.
    fn reachable(state: &mut State, key: &str, types: SharedTypes) -> SharedTypes {
        let Some(reach) = state.reach.get(key).cloned().filter(|r| !r.is_everywhere()) else { return types };
        if let Some((base, r, out)) = state.reached.get(key)
            && Arc::ptr_eq(base, &types)
            && *r == reach
        {
            return out.clone();
        }
        let out = Arc::new(reach.narrow(&types));
        state.reached.insert(key.to_string(), (types, reach, out.clone()));
        out
    }

    /// Moves the spot market: every spot offering's price becomes `market`'s, for launches,
    /// the instance types callers read, and the running spot instances (billed at the market
    /// price, as EC2 bills them). Fails when the change is out of range.
    pub fn set_spot_market(&self, market: SpotMarket) -> Result<(), CloudError> {
        if !(0.0..=MAX_CHANGE).contains(&market.change) {
            return Err(CloudError::Other(format!(
                "a spot market change of {} is out of range (0 to {MAX_CHANGE})",
                market.change
            )));
        }
        let now = self.clock.now();
        let mut state = self.lock();
        state.market = Some(market);
        state.priced.clear();
        state.overlaid.clear();
        let overlays = Arc::clone(&state.overlays);
        for l in &mut state.instances {
            if l.instance.capacity_type == labels::CAPACITY_TYPE_SPOT && !Self::observed_terminated(&l.instance, now) {
                l.instance.list_price = market.price(&l.instance.instance_type.name, &l.instance.zone, l.model_price);
                overlays::reprice(&overlays, l);
            }
        }
        Ok(())
    }

    fn ice_cached(state: &State, now: Timestamp, key: &OfferingKey) -> bool {
        state.ice.get(key).is_some_and(|until| *until > now)
    }

    /// Types with the insufficient-capacity cache applied at `now`.
    fn with_availability(state: &State, now: Timestamp, base: &[Arc<InstanceType>]) -> Vec<Arc<InstanceType>> {
        base.iter()
            .map(|t| {
                let unavailable = |o: &Offering| {
                    Self::ice_cached(state, now, &(t.name.clone(), o.zone.clone(), o.capacity_type.clone()))
                };
                if state.ice.keys().any(|(n, _, _)| n == &t.name) && t.offerings.iter().any(unavailable) {
                    let mut t2 = InstanceType::clone(t);
                    for o in &mut t2.offerings {
                        if unavailable(o) {
                            o.available = false;
                        }
                    }
                    Arc::new(t2)
                } else {
                    t.clone()
                }
            })
            .collect()
    }

    /// Whether the offering is launchable as far as callers can know (not in the
    /// insufficient-capacity cache now).
    pub fn is_offering_available(&self, instance_type: &str, zone: &str, capacity_type: &str) -> bool {
        let state = self.lock();
        let key = (instance_type.to_string(), zone.to_string(), capacity_type.to_string());
        !Self::ice_cached(&state, self.clock.now(), &key)
    }

    /// Every instance launched so far (terminated ones included), in launch order. An
    /// interrupted instance reads as terminated once EC2 has reclaimed it.
    pub fn instances(&self) -> Vec<SimInstance> {
        let now = self.clock.now();
        let state = self.lock();
        state.instances.iter().map(|l| Self::observed(&l.instance, now)).collect()
    }

    /// The summed hourly price of the instances not terminated, in launch order (what
    /// [`instances`](Self::instances) would give, without copying them).
    pub fn running_price(&self) -> f64 {
        let now = self.clock.now();
        let state = self.lock();
        state.instances.iter().filter(|l| !Self::observed_terminated(&l.instance, now)).map(|l| l.instance.price).sum()
    }

    /// Whether `i` reads as terminated at `now` (see [`observed`](Self::observed)).
    fn observed_terminated(i: &SimInstance, now: Timestamp) -> bool {
        i.terminated || Self::reclaimed_at(i).is_some_and(|at| at <= now)
    }

    /// When EC2 takes the instance back: after a spot interruption warning, or ahead of its
    /// capacity block's end, whichever comes first.
    fn reclaimed_at(i: &SimInstance) -> Option<Timestamp> {
        let spot = i.interrupted_at.map(|at| add(at, SPOT_RECLAIM_AFTER));
        match (spot, i.reclaim_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The instance with this provider ID.
    pub fn instance(&self, provider_id: &str) -> Option<SimInstance> {
        let now = self.clock.now();
        let state = self.lock();
        state.instances.iter().find(|l| l.instance.provider_id == provider_id).map(|l| Self::observed(&l.instance, now))
    }

    fn observed(i: &SimInstance, now: Timestamp) -> SimInstance {
        let mut i = i.clone();
        if !i.terminated
            && let Some(reclaim) = Self::reclaimed_at(&i)
            && reclaim <= now
        {
            i.terminated = true;
            i.terminated_at = Some(reclaim);
        }
        i
    }

    /// Sends a spot interruption warning for the instance; EC2 reclaims it
    /// [`SPOT_RECLAIM_AFTER`] later. `NotFound` when it is unknown or already gone, `NotSpot`
    /// when it is not a spot instance (EC2 sends these warnings only for spot).
    pub fn interrupt(&self, provider_id: &str) -> Result<Interruption, CloudError> {
        let now = self.clock.now();
        let mut state = self.lock();
        let launched = state
            .instances
            .iter_mut()
            .find(|l| l.instance.provider_id == provider_id)
            .ok_or_else(|| CloudError::NotFound(provider_id.to_string()))?;
        if Self::observed(&launched.instance, now).terminated {
            return Err(CloudError::NotFound(provider_id.to_string()));
        }
        let i = &mut launched.instance;
        if i.capacity_type != "spot" {
            return Err(CloudError::NotSpot {
                instance: i.provider_id.clone(),
                capacity_type: i.capacity_type.clone(),
            });
        }
        let at = *i.interrupted_at.get_or_insert(now);
        let warning = Interruption {
            provider_id: i.provider_id.clone(),
            node_name: i.node_name.clone(),
            node_claim: i.node_claim.clone(),
            capacity_type: i.capacity_type.clone(),
            kind: InterruptionKind::SpotInterruption,
            at: now,
            reclaim_at: Some(add(at, SPOT_RECLAIM_AFTER)),
        };
        state.interruptions.push(warning.clone());
        Ok(warning)
    }

    /// Reboots the instance in place: it keeps its ID, node name and price, and is down for the
    /// launch latency from now (the kubelet stand-in plays that on its Node). `NotFound` when it
    /// is unknown or already gone.
    pub fn reboot_instance(&self, provider_id: &str) -> Result<SimInstance, CloudError> {
        let now = self.clock.now();
        let mut state = self.lock();
        let launched = state
            .instances
            .iter_mut()
            .find(|l| l.instance.provider_id == provider_id && !Self::observed(&l.instance, now).terminated)
            .ok_or_else(|| CloudError::NotFound(provider_id.to_string()))?;
        launched.instance.rebooted_at = Some(now);
        Ok(launched.instance.clone())
    }

    /// Sends an interruption notice of `kind` for the instance, as EC2's events reach the
    /// interruption queue. A spot interruption is [`interrupt`](Self::interrupt); a rebalance
    /// recommendation, a state change or a scheduled change is delivered and nothing else
    /// happens to the instance here (whoever sends one models its consequences). `NotFound`
    /// when the instance is unknown or already gone.
    pub fn notify(&self, provider_id: &str, kind: InterruptionKind) -> Result<Interruption, CloudError> {
        if kind == InterruptionKind::SpotInterruption {
            return self.interrupt(provider_id);
        }
        let now = self.clock.now();
        let mut state = self.lock();
        let i = state
            .instances
            .iter()
            .map(|l| &l.instance)
            .find(|i| i.provider_id == provider_id && !Self::observed(i, now).terminated)
            .ok_or_else(|| CloudError::NotFound(provider_id.to_string()))?;
        let notice = Interruption {
            provider_id: i.provider_id.clone(),
            node_name: i.node_name.clone(),
            node_claim: i.node_claim.clone(),
            capacity_type: i.capacity_type.clone(),
            kind,
            at: now,
            reclaim_at: None,
        };
        state.interruptions.push(notice.clone());
        Ok(notice)
    }

    /// [`interrupt`](Self::interrupt) for the instance whose Node is `node_name`.
    pub fn interrupt_node(&self, node_name: &str) -> Result<Interruption, CloudError> {
        let pid = {
            let state = self.lock();
            state
                .instances
                .iter()
                .rev()
                .find(|l| l.instance.node_name == node_name)
                .map(|l| l.instance.provider_id.clone())
        };
        match pid {
            Some(pid) => self.interrupt(&pid),
            None => Err(CloudError::NotFound(format!("node {node_name}"))),
        }
    }

    /// Takes over an instance that was running before the simulation began (a node of a
    /// snapshot of a cluster), with its NodeClaim as recorded. Its type is looked up in the
    /// catalog (or the custom types) for the claim's node class; its price is the offering of its
    /// zone and capacity type. A type or offering the cloud does not sell keeps the node as it
    /// is (its capacity and labels) with no price: [`unpriced`](Self::unpriced) says why, and
    /// the instance counts $0/h in sums rather than a guess. Launches after it never reuse its
    /// instance ID or node name.
    pub fn adopt(&self, existing: &ExistingInstance) -> Result<SimInstance, CloudError> {
        let now = self.clock.now();
        let mut state = self.lock();
        if state.instances.iter().any(|l| l.instance.provider_id == existing.provider_id) {
            return Err(CloudError::Other(format!("instance {} exists already", existing.provider_id)));
        }
        let class_name = existing.claim.spec.node_class_ref.name.clone();
        let settings = state.node_classes.get(&class_name).cloned().unwrap_or_default();
        let (model, base) = self.types_now(&mut state, &class_name, &settings)?;
        let known = existing.instance_type.as_deref().and_then(|name| base.iter().find(|t| t.name == name));
        let offering = known.and_then(|t| {
            t.offerings.iter().find(|o| o.zone == existing.zone && o.capacity_type == existing.capacity_type)
        });
        let (itype, price) = match (known, offering) {
            (Some(t), Some(o)) => (t.clone(), Some(o.price)),
            (known, _) => {
                let why = match (&existing.instance_type, known) {
                    (None, _) => "the node has no node.kubernetes.io/instance-type label".to_string(),
                    (Some(t), None) => {
                        format!("instance type {t} is not in the catalog for region {}", self.config.region)
                    }
                    (Some(_), Some(_)) if existing.capacity_type.is_empty() => {
                        format!("the node has no {} label", labels::CAPACITY_TYPE)
                    }
                    (Some(t), Some(_)) => format!(
                        "instance type {t} has no {} offering in zone {} in the catalog",
                        existing.capacity_type, existing.zone
                    ),
                };
                state.unpriced.insert(existing.provider_id.clone(), why);
                let as_is = InstanceType {
                    name: existing.instance_type.clone().unwrap_or_default(),
                    labels: BTreeMap::new(),
                    capacity: existing.capacity.clone(),
                    overhead: existing.capacity.minus(&existing.allocatable),
                    offerings: Vec::new(),
                    price_estimated: false,
                };
                (known.cloned().unwrap_or_else(|| Arc::new(as_is)), None)
            }
        };
        let instance_id = existing.provider_id.rsplit('/').next().unwrap_or_default().to_string();
        // Launches number their instances after the highest adopted number.
        if let Some(n) = instance_id.strip_prefix("i-").and_then(|h| u64::from_str_radix(h, 16).ok()) {
            state.launched = state.launched.max(n);
        }
        state.adopted_names.insert(existing.node_name.clone());
        let mut claim = existing.claim.clone();
        let status = claim.status.get_or_insert_with(NodeClaimStatus::default);
        status.provider_id = Some(existing.provider_id.clone());
        status.node_name = Some(existing.node_name.clone());
        status.capacity = existing.capacity.clone();
        status.allocatable = existing.allocatable.clone();
        let instance = SimInstance {
            provider_id: existing.provider_id.clone(),
            instance_id,
            node_name: existing.node_name.clone(),
            node_claim: claim.name().to_string(),
            instance_type: itype,
            zone: existing.zone.clone(),
            capacity_type: existing.capacity_type.clone(),
            price: price.unwrap_or(0.0),
            list_price: price.unwrap_or(0.0),
            overlays: Vec::new(),
            labels: Arc::new(existing.labels.clone()),
            launched_at: now,
            ready_at: now,
            terminated: false,
            terminated_at: None,
            interrupted_at: None,
            rebooted_at: None,
            capacity_reservation: existing.labels.get(labels::CAPACITY_RESERVATION_ID).cloned(),
            reclaim_at: None,
        };
        let model_price = model_price(&model, &instance.instance_type.name, &instance.zone, &instance.capacity_type)
            .filter(|_| price.is_some())
            .unwrap_or(0.0);
        let mut launched = Launched { instance, claim: Arc::new(claim), model_price };
        if price.is_some() {
            overlays::reprice(&state.overlays, &mut launched);
        }
        let instance = launched.instance.clone();
        state.instances.push(launched);
        Ok(instance)
    }

    /// Adopted instances the cloud has no price for (provider ID → why), counted $0/h.
    pub fn unpriced(&self) -> BTreeMap<String, String> {
        self.lock().unpriced.clone()
    }

    /// Drains the queued interruption notices, oldest first.
    pub fn take_interruptions(&self) -> Vec<Interruption> {
        std::mem::take(&mut self.lock().interruptions)
    }

    /// The node name of the `n`th instance launched, in `zone`: an address of the zone's share of
    /// 10.0.0.0/8 (32 /24 blocks of each /16 per zone, eight zones), unique for the first
    /// 2,080,768 instances (254 addresses × 32 blocks × 256).
    fn node_name(&self, n: u64, zone: &str) -> String {
        let zone_index = self.zones.iter().position(|z| z == zone).unwrap_or(0) as u64;
        let block = n / 254;
        let second = (block / 32) % 256;
        let third = (zone_index * 32 + block % 32) % 256;
        let fourth = n % 254 + 1;
        let domain = if self.config.region == "us-east-1" {
            "ec2.internal".to_string()
        } else {
            format!("{}.compute.internal", self.config.region)
        };
        format!("ip-10-{second}-{third}-{fourth}.{domain}")
    }

    fn launch(&self, claim: &NodeClaim) -> Result<NodeClaim, CloudError> {
        let now = self.clock.now();
        let mut state = self.lock();
        let class_name = claim.spec.node_class_ref.name.clone();
        let settings = state.node_classes.get(&class_name).cloned().unwrap_or_default();
        let (model, market) = self.types_now(&mut state, &class_name, &settings)?;
        let listed = Self::reachable(&mut state, &class_name, market);
        let context = overlays::claim_context(claim, &state.overlays);
        let overlaid = overlays::overlaid(&mut state, &class_name, &context, listed.clone());
        // Reserved offerings at the reservations' declared prices, after the overlays.
        let base = self.with_reservations(&state, &class_name, overlaid, now);
        let reqs = Requirements::from_node_selector(&claim.spec.requirements);
        let requests = &claim.spec.resources.requests;
        let region = self.config.region.as_str();

        // Types whose own labels and allocatable suit the claim. A claim that names its types
        // (the provisioner's do) has them looked up by name: the base types are sorted by name.
        let suits = |t: &&Arc<InstanceType>| type_meets(&reqs, t, region) && t.fits(requests);
        debug_assert!(base.is_sorted_by(|a, b| a.name < b.name), "base types are sorted by name");
        let named = reqs.get(labels::INSTANCE_TYPE).and_then(kerf_api::Requirement::values);
        let types: Vec<&Arc<InstanceType>> = match named {
            Some(names) => names
                .iter()
                .filter_map(|n| base.binary_search_by(|t| t.name.as_str().cmp(n)).ok().map(|i| &base[i]))
                .filter(suits)
                .collect(),
            None => base.iter().filter(suits).collect(),
        };
        if types.is_empty() {
            // As Karpenter: no launchable type is an insufficient-capacity failure, so the claim
            // is deleted and its pods provisioned afresh rather than retried forever.
            return Err(CloudError::InsufficientCapacity(format!(
                "NodeClaim {}: no instance type satisfies its requirements and resource requests",
                claim.name()
            )));
        }
        // Offerings the claim allows, skipping those known to be out of capacity, then the
        // launch rule: one capacity type, its offerings cheapest first.
        let mut candidates: Vec<(&Arc<InstanceType>, &Offering)> = Vec::new();
        for t in &types {
            for o in &t.offerings {
                let out_of_capacity = || {
                    !state.ice.is_empty()
                        && Self::ice_cached(&state, now, &(t.name.clone(), o.zone.clone(), o.capacity_type.clone()))
                };
                if o.available && offering_allowed(&reqs, o) && !out_of_capacity() {
                    candidates.push((t, o));
                }
            }
        }
        if launch::choose(&mut candidates).is_none() {
            return Err(CloudError::InsufficientCapacity(format!(
                "NodeClaim {}: every offering it allows is out of capacity",
                claim.name()
            )));
        }

        let mut failed = Vec::new();
        let mut chosen = None;
        for (t, o) in candidates {
            if self.config.unavailable.iter().any(|u| u.covers(&t.name, &o.zone, &o.capacity_type)) {
                failed.push(format!("{}/{}/{}", t.name, o.zone, o.capacity_type));
                state.ice.insert((t.name.clone(), o.zone.clone(), o.capacity_type.clone()), add(now, ICE_CACHE_TTL));
                continue;
            }
            chosen = Some((t.clone(), o.clone()));
            break;
        }
        let Some((itype, offering)) = chosen else {
            return Err(CloudError::InsufficientCapacity(format!(
                "NodeClaim {}: no capacity for {}",
                claim.name(),
                failed.join(", ")
            )));
        };

        state.launched += 1;
        while state.adopted_names.contains(&self.node_name(state.launched, &offering.zone)) {
            state.launched += 1;
        }
        let n = state.launched;
        let instance_id = format!("i-{n:017x}");
        let provider_id = format!("aws:///{}/{instance_id}", offering.zone);
        let node_name = self.node_name(n, &offering.zone);
        let mut node_labels = claim.metadata.labels.clone().unwrap_or_default();
        node_labels.extend(itype.labels.iter().map(|(k, v)| (k.clone(), v.clone())));
        node_labels.insert(labels::ZONE.to_string(), offering.zone.clone());
        node_labels.insert(labels::REGION.to_string(), region.to_string());
        node_labels.insert(labels::CAPACITY_TYPE.to_string(), offering.capacity_type.clone());
        if let Some(r) = &offering.reservation {
            node_labels.insert(labels::CAPACITY_RESERVATION_ID.to_string(), r.id.clone());
            node_labels.insert(labels::CAPACITY_RESERVATION_TYPE.to_string(), r.reservation_type.clone());
            node_labels.insert(labels::CAPACITY_RESERVATION_INTERRUPTIBLE.to_string(), r.interruptible.to_string());
        }
        // An on-demand launch EC2 puts into a matching `open` reservation: Karpenter still
        // labels it on-demand (it asked for none), but the account pays the reservation's price
        // for it and the reservation has that much less room.
        let absorbed = (offering.capacity_type == labels::CAPACITY_TYPE_ON_DEMAND)
            .then(|| self.absorbing_reservation(&state, &itype.name, &offering.zone, now))
            .flatten();
        let reservation = offering.reservation.as_ref().and_then(|r| self.reservation(&r.id)).or(absorbed);

        let mut out = claim.clone();
        out.metadata.labels = Some(node_labels.clone());
        let status = out.status.get_or_insert_with(NodeClaimStatus::default);
        status.provider_id = Some(provider_id.clone());
        let image = state.images.get(&class_name).and_then(|amis| super::images::image_for(amis, &node_labels));
        status.image_id = Some(image.unwrap_or_else(|| super::images::UNRESOLVED_IMAGE.to_string()));
        status.capacity = itype.capacity.clone();
        status.allocatable = itype.allocatable();

        let list_price =
            model_price(&listed, &itype.name, &offering.zone, &offering.capacity_type).unwrap_or(offering.price);
        let applied: Vec<String> = state
            .overlays
            .applied_to(&itype, &offering.zone, &offering.capacity_type, &context)
            .into_iter()
            .map(str::to_string)
            .collect();
        let instance = SimInstance {
            provider_id,
            instance_id,
            node_name,
            node_claim: claim.name().to_string(),
            instance_type: itype,
            zone: offering.zone.clone(),
            capacity_type: offering.capacity_type.clone(),
            price: absorbed.map_or(offering.price, CapacityReservation::price),
            list_price,
            overlays: applied,
            labels: Arc::new(node_labels),
            launched_at: now,
            ready_at: add(now, self.launch_latency()),
            terminated: false,
            terminated_at: None,
            interrupted_at: None,
            rebooted_at: None,
            capacity_reservation: reservation.map(|r| r.id.clone()),
            reclaim_at: reservation.and_then(CapacityReservation::reclaim_at).map(|d| add(self.epoch, d)),
        };
        let model_price = model_price(&model, &instance.instance_type.name, &instance.zone, &instance.capacity_type)
            .unwrap_or(instance.price);
        state.instances.push(Launched { instance, claim: Arc::new(out.clone()), model_price });
        Ok(out)
    }

    fn terminate(&self, claim: &NodeClaim) -> Result<(), CloudError> {
        let now = self.clock.now();
        let pid = claim.provider_id().ok_or_else(|| CloudError::NotFound(format!("NodeClaim {}", claim.name())))?;
        let mut state = self.lock();
        let launched = state
            .instances
            .iter_mut()
            .find(|l| l.instance.provider_id == pid)
            .ok_or_else(|| CloudError::NotFound(pid.to_string()))?;
        let observed = Self::observed(&launched.instance, now);
        if observed.terminated {
            launched.instance = observed;
            return Err(CloudError::NotFound(pid.to_string()));
        }
        launched.instance.terminated = true;
        launched.instance.terminated_at = Some(now);
        Ok(())
    }

    fn live_claim(&self, provider_id: &str) -> Result<NodeClaim, CloudError> {
        let now = self.clock.now();
        let state = self.lock();
        state
            .instances
            .iter()
            .find(|l| l.instance.provider_id == provider_id && !Self::observed(&l.instance, now).terminated)
            .map(|l| NodeClaim::clone(&l.claim))
            .ok_or_else(|| CloudError::NotFound(provider_id.to_string()))
    }

    fn live_claims(&self) -> Vec<Arc<NodeClaim>> {
        let now = self.clock.now();
        let state = self.lock();
        state
            .instances
            .iter()
            .filter(|l| !Self::observed(&l.instance, now).terminated)
            .map(|l| Arc::clone(&l.claim))
            .collect()
    }

    /// The instance types for a node class, with availability as of now (at list prices: no
    /// NodePool, so no overlay context; see [`SimProvider::instance_types_seen_from`]).
    pub fn instance_types_for(&self, node_class: Option<&EC2NodeClass>) -> Result<Vec<Arc<InstanceType>>, CloudError> {
        self.instance_types_seen_from(node_class, None)
    }
}

/// Where a node class's instances can go, as its resolved status says.
#[derive(Debug, Clone, PartialEq, Default)]
struct Reach {
    /// The zones of its subnets, when they are not all of the cloud's.
    zones: Option<Vec<String>>,
    /// Its images, when some instance type boots none of them.
    amis: Option<Vec<AmiStatus>>,
}

impl Reach {
    /// A class that resolved nothing (not ready) is not narrowed: it launches nothing anyway.
    fn of(status: &EC2NodeClassStatus, cloud_zones: &[String]) -> Reach {
        let mut zones: Vec<String> =
            status.subnets.iter().map(|s| s.zone.clone()).filter(|z| cloud_zones.contains(z)).collect();
        zones.sort();
        zones.dedup();
        let zones = (!status.subnets.is_empty() && zones.len() < cloud_zones.len()).then_some(zones);
        let amis = (!status.amis.is_empty() && status.amis.iter().all(|a| !a.requirements.is_empty()))
            .then(|| status.amis.clone());
        Reach { zones, amis }
    }

    fn is_everywhere(&self) -> bool {
        self.zones.is_none() && self.amis.is_none()
    }

    /// The types an image boots, each with its offerings in the zones (types left with none
    /// dropped); order kept.
    fn narrow(&self, types: &[Arc<InstanceType>]) -> Vec<Arc<InstanceType>> {
        types
            .iter()
            .filter(|t| self.amis.as_ref().is_none_or(|amis| amis.iter().any(|a| a.fits(&t.labels))))
            .filter_map(|t| match &self.zones {
                Some(zones) if !t.offerings.iter().all(|o| zones.contains(&o.zone)) => {
                    let mut within = InstanceType::clone(t);
                    within.offerings.retain(|o| zones.contains(&o.zone));
                    (!within.offerings.is_empty()).then(|| Arc::new(within))
                }
                _ => Some(Arc::clone(t)),
            })
            .collect()
    }
}

/// The price of an offering among `types` (sorted by name).
fn model_price(types: &[Arc<InstanceType>], name: &str, zone: &str, capacity_type: &str) -> Option<f64> {
    let i = types.binary_search_by(|t| t.name.as_str().cmp(name)).ok()?;
    types[i].offerings.iter().find(|o| o.zone == zone && o.capacity_type == capacity_type).map(|o| o.price)
}

impl CloudProvider for SimProvider {
    async fn create(&self, claim: &NodeClaim) -> Result<NodeClaim, CloudError> {
        self.launch(claim)
    }

    async fn delete(&self, claim: &NodeClaim) -> Result<(), CloudError> {
        self.terminate(claim)
    }

    async fn get(&self, provider_id: &str) -> Result<NodeClaim, CloudError> {
        self.live_claim(provider_id)
    }

    async fn list(&self) -> Result<Vec<Arc<NodeClaim>>, CloudError> {
        Ok(self.live_claims())
    }

    async fn instance_types(
        &self,
        node_pool: &NodePool,
        node_class: Option<&EC2NodeClass>,
    ) -> Result<Vec<Arc<InstanceType>>, CloudError> {
        self.instance_types_seen_from(node_class, Some(node_pool))
    }

    fn set_node_overlays(&self, overlays: Arc<kerf_api::overlay::NodeOverlays>) {
        self.use_node_overlays(overlays);
    }

    fn set_reserved_capacity(&self, enabled: bool) {
        self.lock().reserved_capacity_off = !enabled;
    }

    async fn resolve_node_class(&self, node_class: &EC2NodeClass) -> Result<NodeClassResolution, CloudError> {
        // The simulated account changes only when the node class does: no periodic recheck.
        let recorded = self
            .lock()
            .recorded
            .get(node_class.name())
            .filter(|(spec, _)| *spec == node_class.spec)
            .map(|(_, status)| status.clone());
        let now = self.clock.now();
        let mut status = match &recorded {
            Some(r) => super::nodeclass::resolve_recorded(node_class, r, &self.zones, now),
            None => super::nodeclass::resolve(node_class, &self.zones, now),
        };
        // Capacity reservations start, drain and end in time: the class is resolved again then.
        let (t, terms) = (self.offset(now), &node_class.spec.capacity_reservation_selector_terms);
        let (gate, read_error) = {
            let state = self.lock();
            (!state.reserved_capacity_off, state.reservation_read_error.clone())
        };
        let generation = node_class.metadata.generation;
        let mut selected = Vec::new();
        if gate {
            match read_error {
                None => {
                    selected = super::reservations::select(terms, &self.config.capacity_reservations, t);
                    status.capacity_reservations = selected.iter().map(|r| r.status(self.epoch, t)).collect();
                }
                // A failed read keeps what the class listed before.
                Some(_) => {
                    let before = &status.capacity_reservations;
                    selected = (self.config.capacity_reservations.iter())
                        .filter(|r| before.iter().any(|b| b.id == r.id))
                        .collect();
                }
            }
            crate::nodeclass_ready::set_reservations_read(
                &mut status.conditions,
                read_error.map_or(Ok(()), Err),
                now,
                generation,
            );
        } else {
            status.capacity_reservations = Vec::new();
        }
        crate::nodeclass_ready::set_ready(&mut status.conditions, gate, now, generation);
        let recheck_after = super::reservations::next_change(terms, &self.config.capacity_reservations, t);
        {
            let mut state = self.lock();
            state.reach.insert(node_class.name().to_string(), Reach::of(&status, &self.zones));
            state.images.insert(node_class.name().to_string(), status.amis.clone());
            state.reservations.insert(node_class.name().to_string(), selected.iter().map(|r| r.id.clone()).collect());
        }
        self.register_node_class(node_class);
        Ok(NodeClassResolution { status, recheck_after })
    }

    async fn is_drifted(
        &self,
        claim: &NodeClaim,
        node_class: Option<&EC2NodeClass>,
    ) -> Result<Option<String>, CloudError> {
        // Every claim is checked on every disruption pass: each node class version's hash is
        // computed once (encoding and hashing its spec on every check is a hot path in large simulations).
        let hash = |nc: &EC2NodeClass| {
            let mut hashes = self.class_hashes.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let entry = hashes.entry(nc.metadata.name.clone().unwrap_or_default()).or_default();
            if entry.0.is_none() || entry.0 != nc.metadata.resource_version {
                *entry = (nc.metadata.resource_version.clone(), nc.static_hash());
            }
            entry.1.clone()
        };
        if let Some(drift) = node_class.and_then(|nc| crate::provider::node_class_hash_drift_with(claim, nc, hash)) {
            return Ok(Some(drift));
        }
        if !self.lock().reserved_capacity_off
            && let Some(drift) = node_class.and_then(|nc| super::reservations::reservation_drift(claim, nc))
        {
            return Ok(Some(drift));
        }
        Ok(node_class.and_then(|nc| super::images::ami_drift(claim, nc)))
    }

    async fn reboot(&self, claim: &NodeClaim) -> Result<(), CloudError> {
        let pid = claim.provider_id().ok_or_else(|| CloudError::NotFound(format!("NodeClaim {}", claim.name())))?;
        self.reboot_instance(pid).map(|_| ())
    }

    async fn interruptions(&self) -> Result<Vec<InterruptionNotice>, CloudError> {
        self.warn_ending_blocks();
        let taken = self.take_interruptions();
        let now = self.clock.now();
        let mut state = self.lock();
        let mut out = Vec::with_capacity(taken.len());
        for w in taken {
            // The capacity behind a reclaimed spot instance is gone for a while: as the
            // insufficient-capacity cache, the offering is unavailable until the TTL passes.
            if w.kind == InterruptionKind::SpotInterruption
                && let Some(l) = state.instances.iter().find(|l| l.instance.provider_id == w.provider_id)
            {
                let key = (l.instance.instance_type.name.clone(), l.instance.zone.clone(), w.capacity_type.clone());
                state.ice.insert(key, add(now, ICE_CACHE_TTL));
            }
            out.push(InterruptionNotice { provider_id: w.provider_id, kind: w.kind, terminates_at: w.reclaim_at });
        }
        Ok(out)
    }

    fn name(&self) -> &'static str {
        "sim"
    }
}
