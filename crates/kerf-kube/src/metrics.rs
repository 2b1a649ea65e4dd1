//! Prometheus metrics with Karpenter's names and label names, so its dashboards and alerts work
//! on kerf. They are observations of what the controllers did (watch events, the disruption
//! records, cluster state after a pass), never a second account of a decision. The registry also
//! holds kerf's own counters of the event recorder ([`EventMetrics`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use kerf_api::labels;
use kerf_cloud::CloudProvider;
use kerf_controller::{AnyObject, DisruptionRecord, Manager, WatchEvent};
use kerf_scheduling::InstanceType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::recorder::EventMetrics;

type Labels = Vec<(String, String)>;
/// `karpenter_pods_state`'s labels: static names and shared values. The gauge has one series
/// per pod, so its label sets are most of what the metrics hold in a big cluster; the values
/// other than the pod's name (namespace, owner, the node's labels, phase) repeat across
/// thousands of pods and are stored once per pass ([`Interned`]).
type PodLabels = [(&'static str, Arc<str>); 10];
type FloatGauge = Gauge<f64, AtomicU64>;

fn lset<const N: usize>(pairs: [(&str, &str); N]) -> Labels {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn scheduling_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

/// The metric families, and what is needed to count each change once.
pub struct Metrics {
    registry: Arc<Registry>,
    claims_created: Family<Labels, Counter>,
    claims_terminated: Family<Labels, Counter>,
    nodes_created: Family<Labels, Counter>,
    pods_state: Family<PodLabels, Gauge>,
    scheduling_duration: Family<Labels, Histogram, fn() -> Histogram>,
    pool_usage: Family<Labels, FloatGauge>,
    pool_limit: Family<Labels, FloatGauge>,
    price_estimate: Family<Labels, FloatGauge>,
    decisions: Family<Labels, Counter>,
    reversals: Family<Labels, Counter>,
    counted_reversals: usize,
    /// The event recorder's counters.
    events: EventMetrics,
    /// NodeClaims and registered Nodes already seen (so each is counted once).
    claims: BTreeSet<String>,
    registered: BTreeSet<String>,
    /// Disruption records already counted.
    counted_records: usize,
    pod_generation: Option<u64>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let claims_created = Family::<Labels, Counter>::default();
        registry.register(
            "karpenter_nodeclaims_created",
            "Number of nodeclaims created in total by Karpenter. Labeled by reason the nodeclaim was created and the owning nodepool.",
            claims_created.clone(),
        );
        let claims_terminated = Family::<Labels, Counter>::default();
        registry.register(
            "karpenter_nodeclaims_terminated",
            "Number of nodeclaims terminated in total by Karpenter. Labeled by the owning nodepool, capacity type and zone.",
            claims_terminated.clone(),
        );
        let nodes_created = Family::<Labels, Counter>::default();
        registry.register(
            "karpenter_nodes_created",
            "Number of nodes created in total by Karpenter. Labeled by owning nodepool.",
            nodes_created.clone(),
        );
        let pods_state = Family::<PodLabels, Gauge>::default();
        registry.register(
            "karpenter_pods_state",
            "Pod state is the current state of pods. This metric can be used several ways as it is labeled by the pod name, namespace, owner, node, nodepool name, zone, architecture, capacity type, instance type and pod phase.",
            pods_state.clone(),
        );
        let scheduling_duration =
            Family::<Labels, Histogram, fn() -> Histogram>::new_with_constructor(scheduling_histogram);
        registry.register(
            "karpenter_scheduler_scheduling_duration_seconds",
            "Duration of scheduling simulations used for deprovisioning and provisioning in seconds (kerf: a controller pass that had pending pods to place).",
            scheduling_duration.clone(),
        );
        let pool_usage = Family::<Labels, FloatGauge>::default();
        registry.register(
            "karpenter_nodepools_usage",
            "The amount of resources that have been provisioned for a nodepool. Labeled by nodepool name and resource type.",
            pool_usage.clone(),
        );
        let pool_limit = Family::<Labels, FloatGauge>::default();
        registry.register(
            "karpenter_nodepools_limit",
            "Limits specified on the nodepool that restrict the quantity of resources provisioned. Labeled by nodepool name and resource type.",
            pool_limit.clone(),
        );
        let price_estimate = Family::<Labels, FloatGauge>::default();
        registry.register(
            "karpenter_cloudprovider_instance_type_offering_price_estimate",
            "Instance type offering estimated hourly price used when making informed decisions on node cost calculation, based on instance type, capacity type, and zone.",
            price_estimate.clone(),
        );
        let decisions = Family::<Labels, Counter>::default();
        registry.register(
            "karpenter_voluntary_disruption_decisions",
            "Number of disruption decisions performed. Labeled by disruption decision, reason, and consolidation type.",
            decisions.clone(),
        );
        let reversals = Family::<Labels, Counter>::default();
        registry.register(
            "kerf_consolidation_reversals",
            "Consolidation decisions that were undone: the provisioner launched a node for pods the consolidation had moved. Labeled by nodepool.",
            reversals.clone(),
        );
        let events = EventMetrics::register(&mut registry);
        Metrics {
            registry: Arc::new(registry),
            reversals,
            counted_reversals: 0,
            claims_created,
            claims_terminated,
            nodes_created,
            pods_state,
            scheduling_duration,
            pool_usage,
            pool_limit,
            price_estimate,
            decisions,
            events,
            claims: BTreeSet::new(),
            registered: BTreeSet::new(),
            counted_records: 0,
            pod_generation: None,
        }
    }

    /// The registry, for the `/metrics` endpoint.
    pub fn registry(&self) -> Arc<Registry> {
        Arc::clone(&self.registry)
    }

    /// The event recorder's counters (`kerf_events_dropped_total`, `kerf_events_deduplicated_total`).
    pub fn events(&self) -> EventMetrics {
        self.events.clone()
    }

    /// Counts what a watch event shows kerf did: a NodeClaim created or gone, a Node registered.
    /// `counting` is off while caches fill (objects that existed before this process started are
    /// not new) and on a standby (the leader counts); `replacement` says whether a claim was
    /// launched by a disruption decision.
    pub fn observe(&mut self, event: &WatchEvent, counting: bool, replacement: impl Fn(&str) -> bool) {
        match event {
            WatchEvent::Applied(AnyObject::NodeClaim(c)) => {
                let new = self.claims.insert(c.name().to_string());
                let pool = c.metadata.labels.as_ref().and_then(|l| l.get(labels::NODE_POOL)).cloned();
                let reason = if replacement(c.name()) { "disruption" } else { "provisioning" };
                let l = lset([
                    ("reason", reason),
                    ("nodepool", &pool.unwrap_or_default()),
                    ("min_values_relaxed", "false"),
                ]);
                if new && counting {
                    self.claims_created.get_or_create(&l).inc();
                }
            }
            WatchEvent::Deleted(AnyObject::NodeClaim(c)) => {
                self.claims.remove(c.name());
                if counting {
                    let l = c.metadata.labels.clone().unwrap_or_default();
                    let get = |k: &str| l.get(k).cloned().unwrap_or_default();
                    self.claims_terminated
                        .get_or_create(&lset([
                            ("nodepool", &get(labels::NODE_POOL)),
                            ("capacity_type", &get(labels::CAPACITY_TYPE)),
                            ("zone", &get(labels::ZONE)),
                        ]))
                        .inc();
                }
            }
            WatchEvent::Applied(AnyObject::Node(n)) => {
                let l = n.metadata.labels.clone().unwrap_or_default();
                let name = n.metadata.name.clone().unwrap_or_default();
                if l.get(labels::REGISTERED).map(String::as_str) == Some("true")
                    && self.registered.insert(name)
                    && counting
                {
                    let pool = l.get(labels::NODE_POOL).cloned().unwrap_or_default();
                    self.nodes_created.get_or_create(&lset([("nodepool", &pool)])).inc();
                }
            }
            WatchEvent::Deleted(AnyObject::Node(n)) => {
                self.registered.remove(n.metadata.name.as_deref().unwrap_or_default());
            }
            _ => {}
        }
    }

    /// A pass that had pending pods to place took `seconds`.
    pub fn scheduling_pass(&self, seconds: f64) {
        self.scheduling_duration.get_or_create(&lset([("controller", "provisioner")])).observe(seconds);
    }

    /// Brings the gauges up to date with the controllers' state, and counts new disruption
    /// decisions.
    pub fn after_pass<P: CloudProvider>(&mut self, manager: &Manager<P>) {
        self.count_decisions(manager.disruptions());
        let reversals = manager.consolidation_reversals();
        for r in reversals.get(self.counted_reversals..).unwrap_or_default() {
            self.reversals.get_or_create(&lset([("nodepool", r.node_pool.as_str())])).inc();
        }
        self.counted_reversals = reversals.len();
        let state = manager.state();
        self.pool_usage.clear();
        self.pool_limit.clear();
        for (name, pool) in state.node_pools() {
            for (resource, q) in pool.status.iter().flat_map(|s| s.resources.iter()) {
                self.pool_usage.get_or_create(&lset([("nodepool", name), ("resource_type", resource)])).set(q.as_f64());
            }
            for (resource, q) in pool.spec.limits.iter().flat_map(|l| l.iter()) {
                self.pool_limit.get_or_create(&lset([("nodepool", name), ("resource_type", resource)])).set(q.as_f64());
            }
        }
        if self.pod_generation != Some(state.pod_generation()) {
            self.pod_generation = Some(state.pod_generation());
            self.pods_state.clear();
            let mut values = Interned::default();
            for pod in state.pods().values() {
                let node = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()).and_then(|n| state.node(n));
                self.pods_state.get_or_create(&pod_labels(pod, node, &mut values)).set(1);
            }
        }
    }

    fn count_decisions(&mut self, records: &[DisruptionRecord]) {
        if records.len() < self.counted_records {
            self.counted_records = 0;
        }
        // One decision may remove several nodes (multi-node consolidation): one record each,
        // with the same decision time, reason and replacements.
        let mut decisions: BTreeMap<(i64, &str, Vec<String>), usize> = BTreeMap::new();
        for r in &records[self.counted_records..] {
            let reason = r.reason.as_str();
            if matches!(reason, "Expired" | "Interrupted") {
                continue; // forceful, not voluntary
            }
            *decisions.entry((r.decided_at.as_millisecond(), reason, r.replacements.clone())).or_default() += 1;
        }
        self.counted_records = records.len();
        for ((_, reason, replacements), nodes) in decisions {
            let decision = if replacements.is_empty() { "delete" } else { "replace" };
            let consolidation = match reason {
                "Empty" => "empty",
                "Underutilized" if nodes > 1 => "multi",
                "Underutilized" => "single",
                _ => "",
            };
            self.decisions
                .get_or_create(&lset([
                    ("decision", decision),
                    ("reason", &reason.to_ascii_lowercase()),
                    ("consolidation_type", consolidation),
                ]))
                .inc();
        }
    }

    /// The offerings' prices of the instance types the NodePools may launch.
    pub fn set_prices(&self, types: &[Arc<InstanceType>]) {
        self.price_estimate.clear();
        for t in types {
            for o in &t.offerings {
                self.price_estimate
                    .get_or_create(&lset([
                        ("instance_type", &t.name),
                        ("capacity_type", &o.capacity_type),
                        ("zone", &o.zone),
                    ]))
                    .set(o.price);
            }
        }
    }
}

/// Label values handed out once each: equal values share one allocation.
#[derive(Default)]
struct Interned(std::collections::HashSet<Arc<str>>);

impl Interned {
    fn get(&mut self, v: &str) -> Arc<str> {
        if let Some(have) = self.0.get(v) {
            return Arc::clone(have);
        }
        let new: Arc<str> = Arc::from(v);
        self.0.insert(Arc::clone(&new));
        new
    }
}

fn pod_labels(
    pod: &kerf_api::SlimPod,
    node: Option<&k8s_openapi::api::core::v1::Node>,
    values: &mut Interned,
) -> PodLabels {
    let owner = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
        .map(|o| format!("{}/{}", o.kind, o.name))
        .unwrap_or_default();
    let node_labels = node.and_then(|n| n.metadata.labels.as_ref());
    let mut nl = |k: &str| values.get(node_labels.and_then(|l| l.get(k)).map(String::as_str).unwrap_or_default());
    let node_pool = nl(labels::NODE_POOL);
    let zone = nl(labels::ZONE);
    let arch = nl(labels::ARCH);
    let capacity_type = nl(labels::CAPACITY_TYPE);
    let instance_type = nl(labels::INSTANCE_TYPE);
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("Pending");
    [
        ("name", Arc::from(pod.metadata.name.as_deref().unwrap_or_default())),
        ("namespace", values.get(pod.metadata.namespace.as_deref().unwrap_or_default())),
        ("owner", values.get(&owner)),
        ("node", values.get(node.and_then(|n| n.metadata.name.as_deref()).unwrap_or_default())),
        ("nodepool", node_pool),
        ("zone", zone),
        ("arch", arch),
        ("capacity_type", capacity_type),
        ("instance_type", instance_type),
        ("phase", values.get(phase)),
    ]
}

/// The registry in Prometheus's text format.
pub fn encode(registry: &Registry) -> String {
    let mut out = String::new();
    if let Err(e) = prometheus_client::encoding::text::encode(&mut out, registry) {
        tracing::error!(error = %e, "cannot encode metrics");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use kerf_controller::Object;

    fn claim(name: &str) -> AnyObject {
        let c: kerf_api::NodeClaim = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": "default", "karpenter.sh/capacity-type": "spot", "topology.kubernetes.io/zone": "us-west-2a"}},
            "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}, "requirements": []}
        }))
        .expect("claim");
        c.into_any()
    }

    #[test]
    fn claims_count_once_when_created_and_once_when_gone_never_while_caches_fill() {
        let mut m = Metrics::new();
        m.observe(&WatchEvent::Applied(claim("old")), false, |_| false);
        m.observe(&WatchEvent::Applied(claim("a")), true, |_| false);
        m.observe(&WatchEvent::Applied(claim("a")), true, |_| false);
        m.observe(&WatchEvent::Applied(claim("b")), true, |n| n == "b");
        m.observe(&WatchEvent::Deleted(claim("a")), true, |_| false);
        let text = encode(&m.registry());
        assert!(
            text.contains(r#"karpenter_nodeclaims_created_total{reason="provisioning",nodepool="default",min_values_relaxed="false"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"karpenter_nodeclaims_created_total{reason="disruption",nodepool="default",min_values_relaxed="false"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(
                r#"karpenter_nodeclaims_terminated_total{nodepool="default",capacity_type="spot",zone="us-west-2a"} 1"#
            ),
            "{text}"
        );
    }
}
