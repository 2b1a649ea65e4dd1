//! The cloud adapter: what the driver asks of the simulated cloud beyond [`CloudProvider`]
//! (its instances, spot interruptions, adopting a snapshot's nodes, prices), and the cached
//! fleet price the cost accounting reads at every sample and every advance of the clock.
//!
//! Kept apart from the clock loop so that another cloud (the chaos bench's faulty decorator)
//! plugs in by implementing one trait.

use std::collections::BTreeMap;

use kerf_api::EC2NodeClass;
use kerf_cloud::{CloudProvider, Timestamp};

use crate::driver::after;
use crate::kubelet::Instance;

/// What the driver needs from the simulated cloud beyond [`CloudProvider`].
pub trait SimCloud: CloudProvider {
    /// Every instance launched so far (terminated ones included), in launch order.
    fn sim_instances(&self) -> Vec<Instance>;
    /// Sends a spot interruption warning for the instance; the provider's reason when it cannot
    /// (no such instance, not a spot instance).
    fn sim_interrupt(&self, provider_id: &str) -> Result<(), String>;
    /// Makes an applied EC2NodeClass the node class claims launch with.
    fn sim_register_node_class(&self, _node_class: &EC2NodeClass) {}
    /// Takes the status an applied EC2NodeClass carries (a snapshot's) as what the account holds
    /// for it while its spec stays.
    fn sim_record_node_class_status(&self, _node_class: &EC2NodeClass) {}
    /// Takes over an instance running before the simulation began (a node of a cluster
    /// snapshot); the reason when this cloud cannot.
    fn sim_adopt(&self, existing: &kerf_cloud::sim::ExistingInstance) -> Result<(), String> {
        Err(format!("this cloud cannot take over the running instance {}", existing.provider_id))
    }
    /// Instances whose price the cloud does not know (provider ID → why); they count $0/h.
    fn sim_unpriced(&self) -> BTreeMap<String, String> {
        BTreeMap::new()
    }
    /// The summed hourly price of the instances not terminated, in launch order.
    fn sim_fleet_price(&self) -> f64 {
        self.sim_instances().iter().filter(|i| !i.terminated).map(|i| i.price).sum()
    }
    /// Moves the spot market (see `kerf_cloud::sim::spot_market`); the reason when this cloud
    /// cannot.
    fn sim_spot_market(&self, _market: kerf_cloud::sim::SpotMarket) -> Result<(), String> {
        Err("this cloud has no spot market to move".to_string())
    }
}

impl SimCloud for kerf_cloud::sim::SimProvider {
    fn sim_instances(&self) -> Vec<Instance> {
        self.instances()
            .into_iter()
            .map(|i| Instance {
                terminates_at: i
                    .interrupted_at
                    .map(|t| after(t, kerf_cloud::sim::provider::SPOT_RECLAIM_AFTER))
                    .into_iter()
                    .chain(i.reclaim_at)
                    .min()
                    .filter(|_| !i.terminated),
                provider_id: i.provider_id,
                node_name: i.node_name,
                instance_type: i.instance_type.name.clone(),
                zone: i.zone,
                capacity_type: i.capacity_type,
                price: i.price,
                list_price: i.list_price,
                overlays: i.overlays,
                price_estimated: i.instance_type.price_estimated,
                labels: i.labels,
                launched_at: i.launched_at,
                ready_at: i.ready_at,
                terminated: i.terminated,
                terminated_at: i.terminated_at,
                rebooted: i.rebooted_at.map(|at| (at, after(at, self.launch_latency()))),
                capacity_reservation: i.capacity_reservation,
            })
            .collect()
    }

    fn sim_interrupt(&self, provider_id: &str) -> Result<(), String> {
        self.interrupt(provider_id).map(|_| ()).map_err(|e| e.to_string())
    }

    fn sim_register_node_class(&self, node_class: &EC2NodeClass) {
        self.register_node_class(node_class);
    }

    fn sim_record_node_class_status(&self, node_class: &EC2NodeClass) {
        self.record_node_class_status(node_class);
    }

    fn sim_fleet_price(&self) -> f64 {
        self.running_price()
    }

    fn sim_adopt(&self, existing: &kerf_cloud::sim::ExistingInstance) -> Result<(), String> {
        self.adopt(existing).map(|_| ()).map_err(|e| e.to_string())
    }

    fn sim_unpriced(&self) -> BTreeMap<String, String> {
        self.unpriced()
    }

    fn sim_spot_market(&self, market: kerf_cloud::sim::SpotMarket) -> Result<(), String> {
        self.set_spot_market(market).map_err(|e| e.to_string())
    }
}

/// The fleet's $/h, cached. Instances change only when claims do (launch, delete) or when a
/// reclaim after an interruption falls due, so the sum is kept between those.
#[derive(Debug, Default)]
pub(crate) struct FleetPrice {
    /// (computed at, fleet $/h, stale).
    cached: Option<(Timestamp, f64, bool)>,
}

impl FleetPrice {
    /// The instances may have changed: the next read sums them again.
    pub(crate) fn invalidate(&mut self) {
        if let Some(c) = self.cached.as_mut() {
            c.2 = true;
        }
    }

    /// The fleet's $/h at `now`; `kubelet_wake` is the kubelet's next wake-up (a reclaim falling
    /// due among others).
    pub(crate) fn get<C: SimCloud + ?Sized>(
        &mut self,
        cloud: &C,
        now: Timestamp,
        kubelet_wake: Option<Timestamp>,
    ) -> f64 {
        if self.cached.is_none_or(|(at, _, stale)| stale || kubelet_wake.is_some_and(|w| w > at && w <= now)) {
            let p = cloud.sim_fleet_price() + 0.0;
            self.cached = Some((now, p, false));
        }
        self.cached.map_or(0.0, |(_, p, _)| p)
    }
}
