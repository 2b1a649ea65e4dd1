//! Prometheus metrics with Karpenter's names and label names, so its dashboards and alerts work
//! on kerf. They are observations of what the controllers did (watch events, the disruption
//! records, cluster state after a pass), never a second account of a decision. The registry also
//! holds kerf's own counters of the event recorder ([`EventMetrics`]).

use kerf_api::MetaView;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, PoisonError};

use kerf_api::cluster::{AnyObject, WatchEvent};
use kerf_api::labels;
use kerf_cloud::CloudProvider;
use kerf_controller::disruption::balanced::{MoveCounts, SCORE_BUCKETS, WhatIfCounts};
use kerf_controller::disruption::counts::{DisruptionCounts, DisruptionLabels};
use kerf_controller::disruption::{RepairAction, RepairRecord};
use kerf_controller::{DisruptionRecord, Manager};
use kerf_scheduling::InstanceType;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::encoding::NoLabelSet;
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::recorder::EventMetrics;

type Labels = Vec<(String, String)>;
type FloatGauge = Gauge<f64, AtomicU64>;

fn lset<const N: usize>(pairs: [(&str, &str); N]) -> Labels {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// `AcceleratedHardwareReady` → `accelerated_hardware_ready`, as Karpenter labels conditions.
fn snake_case(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 4);
    for (i, c) in name.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
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
    pods_state: Arc<PodsState>,
    consolidation: Arc<ConsolidationMoves>,
    disrupted: Arc<Disrupted>,
    scheduling_duration: Family<Labels, Histogram, fn() -> Histogram>,
    pool_usage: Family<Labels, FloatGauge>,
    pool_limit: Family<Labels, FloatGauge>,
    /// `kerf_provisioning_requests{class,state}`.
    provisioning_requests: Family<Labels, Gauge>,
    /// `kerf_capacity_quota_used{quota,resource}` and `kerf_capacity_quota_limit{quota,resource}`.
    quota_used: Family<Labels, FloatGauge>,
    quota_limit: Family<Labels, FloatGauge>,
    price_estimate: Family<Labels, FloatGauge>,
    decisions: Family<Labels, Counter>,
    reversals: Family<Labels, Counter>,
    counted_reversals: usize,
    unhealthy_disrupted: Family<Labels, Counter>,
    unhealthy_rebooted: Family<Labels, Counter>,
    counted_repairs: usize,
    daemon_room_evictions: Family<Labels, Counter>,
    counted_rooms: usize,
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
            "NodeClaims kerf has created, by why it created them (provisioning or disruption), their NodePool and whether minValues was relaxed.",
            claims_created.clone(),
        );
        let claims_terminated = Family::<Labels, Counter>::default();
        registry.register(
            "karpenter_nodeclaims_terminated",
            "NodeClaims whose instance kerf has terminated, by NodePool, capacity type and zone.",
            claims_terminated.clone(),
        );
        let nodes_created = Family::<Labels, Counter>::default();
        registry.register(
            "karpenter_nodes_created",
            "Nodes that joined for a NodeClaim kerf created, by NodePool.",
            nodes_created.clone(),
        );
        let pods_state = Arc::new(PodsState::default());
        registry.register_collector(Box::new(Arc::clone(&pods_state)));
        let consolidation = Arc::new(ConsolidationMoves::default());
        registry.register_collector(Box::new(Arc::clone(&consolidation)));
        let disrupted = Arc::new(Disrupted::default());
        registry.register_collector(Box::new(Arc::clone(&disrupted)));
        let scheduling_duration =
            Family::<Labels, Histogram, fn() -> Histogram>::new_with_constructor(scheduling_histogram);
        registry.register(
            "karpenter_scheduler_scheduling_duration_seconds",
            "Seconds a controller pass spent placing pending pods (passes with none to place are not counted).",
            scheduling_duration.clone(),
        );
        let pool_usage = Family::<Labels, FloatGauge>::default();
        registry.register(
            "karpenter_nodepools_usage",
            "Resources of the NodeClaims a NodePool holds now, by NodePool and resource.",
            pool_usage.clone(),
        );
        let pool_limit = Family::<Labels, FloatGauge>::default();
        registry.register(
            "karpenter_nodepools_limit",
            "A NodePool's spec.limits, by NodePool and resource.",
            pool_limit.clone(),
        );
        let provisioning_requests = Family::<Labels, Gauge>::default();
        registry.register(
            "kerf_provisioning_requests",
            "ProvisioningRequests of the classes kerf answers, by class and by where their conditions stand (Pending, Accepted, Provisioned, Failed, BookingExpired, CapacityRevoked).",
            provisioning_requests.clone(),
        );
        let quota_used = Family::<Labels, FloatGauge>::default();
        registry.register(
            "kerf_capacity_quota_used",
            "What the nodes a CapacityQuota selects hold (its status.used), by quota and resource.",
            quota_used.clone(),
        );
        let quota_limit = Family::<Labels, FloatGauge>::default();
        registry.register(
            "kerf_capacity_quota_limit",
            "A CapacityQuota's spec.limits.resources, by quota and resource.",
            quota_limit.clone(),
        );
        let price_estimate = Family::<Labels, FloatGauge>::default();
        registry.register(
            "karpenter_cloudprovider_instance_type_offering_price_estimate",
            "The $/hour kerf uses for an offering when it compares costs, by instance type, capacity type and zone.",
            price_estimate.clone(),
        );
        let decisions = Family::<Labels, Counter>::default();
        registry.register(
            "karpenter_voluntary_disruption_decisions",
            "Disruption decisions kerf carried out, by decision (delete or replace), reason and consolidation type.",
            decisions.clone(),
        );
        let reversals = Family::<Labels, Counter>::default();
        registry.register(
            "kerf_consolidation_reversals",
            "Consolidation decisions that were undone: the provisioner launched a node for pods the consolidation had moved, by NodePool.",
            reversals.clone(),
        );
        let unhealthy_disrupted = Family::<Labels, Counter>::default();
        registry.register(
            "karpenter_nodeclaims_unhealthy_disrupted",
            "NodeClaims node repair replaced, by the unhealthy condition, NodePool, capacity type and image.",
            unhealthy_disrupted.clone(),
        );
        let unhealthy_rebooted = Family::<Labels, Counter>::default();
        registry.register(
            "kerf_nodeclaims_unhealthy_rebooted",
            "NodeClaims node repair rebooted (RebootForRepair), by the unhealthy condition, NodePool, capacity type and image.",
            unhealthy_rebooted.clone(),
        );
        let daemon_room_evictions = Family::<Labels, Counter>::default();
        registry.register(
            "kerf_daemonset_room_evictions",
            "Pods evicted from a node kerf launched to make room again for a DaemonSet pod whose kept room other pods took, by NodePool.",
            daemon_room_evictions.clone(),
        );
        let events = EventMetrics::register(&mut registry);
        Metrics {
            daemon_room_evictions,
            counted_rooms: 0,
            registry: Arc::new(registry),
            reversals,
            counted_reversals: 0,
            unhealthy_disrupted,
            unhealthy_rebooted,
            counted_repairs: 0,
            claims_created,
            claims_terminated,
            nodes_created,
            pods_state,
            consolidation,
            disrupted,
            scheduling_duration,
            pool_usage,
            pool_limit,
            provisioning_requests,
            quota_used,
            quota_limit,
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
        self.consolidation.moves.set(manager.consolidation_moves());
        self.consolidation.what_if.set(manager.balanced_what_if());
        self.disrupted.0.set(manager.disruption_counts());
        let reversals = manager.consolidation_reversals();
        for r in reversals.get(self.counted_reversals..).unwrap_or_default() {
            self.reversals.get_or_create(&lset([("nodepool", r.node_pool.as_str())])).inc();
        }
        self.counted_reversals = reversals.len();
        self.count_repairs(manager.repairs());
        let rooms = manager.daemon_rooms();
        for r in rooms.get(self.counted_rooms..).unwrap_or_default() {
            self.daemon_room_evictions
                .get_or_create(&lset([("nodepool", r.node_pool.as_str())]))
                .inc_by(r.evicted.len() as u64);
        }
        self.counted_rooms = rooms.len();
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
        self.provisioning_requests.clear();
        for r in state.provisioning_requests().values() {
            if !kerf_api::provisioningrequest::CLASSES.contains(&r.class()) {
                continue;
            }
            self.provisioning_requests
                .get_or_create(&lset([("class", r.class()), ("state", r.state().as_str())]))
                .inc();
        }
        self.quota_used.clear();
        self.quota_limit.clear();
        for (name, q) in state.capacity_quotas() {
            for (resource, v) in q.status.iter().filter_map(|s| s.used.as_ref()).flat_map(|u| u.resources.iter()) {
                self.quota_used.get_or_create(&lset([("quota", name), ("resource", resource)])).set(v.as_f64());
            }
            for (resource, v) in q.limits().iter() {
                self.quota_limit.get_or_create(&lset([("quota", name), ("resource", resource)])).set(v.as_f64());
            }
        }
        if self.pod_generation != Some(state.pod_generation()) {
            self.pod_generation = Some(state.pod_generation());
            let mut rows = PodRows::for_pods(state.pods(), state.nodes().len());
            for pod in state.pods() {
                let node = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()).and_then(|n| state.node(n));
                rows.push(pod, node);
            }
            self.pods_state.set(rows.done());
        }
    }

    /// Counts the repairs not counted yet: replacements in `karpenter_nodeclaims_unhealthy_disrupted`,
    /// reboots in `kerf_nodeclaims_unhealthy_rebooted`.
    fn count_repairs(&mut self, repairs: &[RepairRecord]) {
        for r in repairs.get(self.counted_repairs..).unwrap_or_default() {
            let family = match r.action {
                RepairAction::Replace => &self.unhealthy_disrupted,
                RepairAction::Reboot => &self.unhealthy_rebooted,
            };
            family
                .get_or_create(&lset([
                    ("condition", &snake_case(r.condition)),
                    ("nodepool", &r.node_pool),
                    ("capacity_type", &r.capacity_type),
                    ("image_id", &r.image_id),
                ]))
                .inc();
        }
        self.counted_repairs = repairs.len();
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

/// `karpenter_pods_state`: one series per pod, labeled by the pod's name, namespace and owner,
/// its node and that node's pool, zone, architecture, capacity type and instance type, and its
/// phase. In a big cluster these series are most of what the metrics hold, so they are not kept
/// as a metric family (a label set and a gauge per pod) but as rows of indexes into one table of
/// label values, written at each scrape; every value but the pod's name repeats across
/// thousands of pods and is stored once.
#[derive(Debug, Default)]
struct PodsState(Mutex<Arc<PodRows>>);

const POD_LABELS: [&str; 10] =
    ["name", "namespace", "owner", "node", "nodepool", "zone", "arch", "capacity_type", "instance_type", "phase"];

impl PodsState {
    fn set(&self, rows: PodRows) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Arc::new(rows);
    }

    fn rows(&self) -> Arc<PodRows> {
        Arc::clone(&self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

impl Collector for PodsState {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let rows = self.rows();
        let mut metric = encoder.encode_descriptor(
            "karpenter_pods_state",
            "1 for each pod kerf sees, with where it runs (node, NodePool, zone, architecture, capacity type, instance type) and its phase.",
            None,
            MetricType::Gauge,
        )?;
        for row in &rows.rows {
            let values = rows.values(row);
            let labels: [(&str, &str); 10] = std::array::from_fn(|i| (POD_LABELS[i], values[i]));
            metric.encode_family(&labels)?.encode_gauge(&1_i64)?;
        }
        Ok(())
    }
}

/// `karpenter_consolidation_moves_total` (the consolidation moves disruption weighed, by
/// NodePool, policy and decision) and `karpenter_consolidation_score` (the Balanced scores of
/// those in Balanced pools), read from the disruption controller's counts at each scrape.
#[derive(Debug, Default)]
struct ConsolidationMoves {
    moves: Latest<MoveCounts>,
    what_if: Latest<WhatIfCounts>,
}

/// The latest copy of counts a controller keeps, taken after a pass (cloned only when they
/// changed) and read at each scrape.
#[derive(Debug, Default)]
struct Latest<T>(Mutex<T>);

impl<T: Clone + PartialEq> Latest<T> {
    fn set(&self, counts: &T) {
        let mut mine = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if *mine != *counts {
            *mine = counts.clone();
        }
    }

    fn get(&self) -> T {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

impl Collector for ConsolidationMoves {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let (counts, what_if) = (self.moves.get(), self.what_if.get());
        let decision = |approved: bool| if approved { "approved" } else { "rejected" };
        let mut moves = encoder.encode_descriptor(
            "karpenter_consolidation_moves",
            "Consolidation moves disruption weighed, by NodePool, consolidation policy and decision (a Balanced pool rejects a move that scores too low).",
            None,
            MetricType::Counter,
        )?;
        for ((pool, policy, approved), n) in &counts.moves {
            let labels = [("decision", decision(*approved)), ("nodepool", pool.as_str()), ("policy", policy)];
            moves.encode_family(&labels)?.encode_counter::<NoLabelSet, _, u64>(n, None)?;
        }
        let mut scores = encoder.encode_descriptor(
            "karpenter_consolidation_score",
            "Balanced scores of consolidation moves (share of the pool's cost saved over share of its disruption cost), by NodePool and decision.",
            None,
            MetricType::Histogram,
        )?;
        for ((pool, approved), (buckets, count, sum)) in &counts.scores {
            let labels = [("decision", decision(*approved)), ("nodepool", pool.as_str()), ("policy", "Balanced")];
            // The encoder adds the buckets up itself: each gets the scores above the one before.
            let mut below = 0;
            let mut b: Vec<(f64, u64)> = Vec::with_capacity(SCORE_BUCKETS.len() + 1);
            for (bound, cumulative) in SCORE_BUCKETS.iter().zip(buckets) {
                b.push((*bound, cumulative - below));
                below = *cumulative;
            }
            b.push((f64::INFINITY, count - below));
            scores.encode_family(&labels)?.encode_histogram::<NoLabelSet>(*sum, *count, &b, None)?;
        }
        let mut shadow = encoder.encode_descriptor(
            "kerf_consolidation_balanced_what_if",
            "Consolidations kerf took, by NodePool, its consolidation policy and what consolidationPolicy Balanced would have decided of each (approved or rejected).",
            None,
            MetricType::Counter,
        )?;
        for (pool, w) in &what_if.pools {
            let taken = w.consolidations - w.balanced_would_refuse;
            for (approved, n) in [(true, taken), (false, w.balanced_would_refuse)] {
                let labels = [("decision", decision(approved)), ("nodepool", pool.as_str()), ("policy", w.policy)];
                shadow.encode_family(&labels)?.encode_counter::<NoLabelSet, _, u64>(&n, None)?;
            }
        }
        Ok(())
    }
}

/// `karpenter_nodeclaims_disrupted_total`, `karpenter_pods_disruption_initiated_total` and
/// `karpenter_pods_disrupted_total`, read from the disruption controller's counts at each scrape.
#[derive(Debug, Default)]
struct Disrupted(Latest<DisruptionCounts>);

impl Collector for Disrupted {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let counts = self.0.get();
        let families: [(&str, &str, &BTreeMap<DisruptionLabels, u64>); 3] = [
            (
                "karpenter_nodeclaims_disrupted",
                "NodeClaims a disruption command took, by reason, NodePool, capacity type, consolidation policy and termination mode.",
                &counts.nodeclaims,
            ),
            (
                "karpenter_pods_disruption_initiated",
                "Reschedulable pods on the nodes a disruption command took, with the labels of karpenter_nodeclaims_disrupted_total.",
                &counts.pods_initiated,
            ),
            (
                "karpenter_pods_disrupted",
                "Reschedulable pods on the nodes whose NodeClaims a disruption command deleted, with the labels of karpenter_nodeclaims_disrupted_total.",
                &counts.pods_disrupted,
            ),
        ];
        for (name, help, series) in families {
            let mut family = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
            for (l, n) in series {
                let labels = [
                    ("reason", l.reason),
                    ("nodepool", l.nodepool.as_str()),
                    ("capacity_type", l.capacity_type.as_str()),
                    ("consolidation_policy", l.consolidation_policy),
                    ("termination_mode", l.termination_mode),
                ];
                family.encode_family(&labels)?.encode_counter::<NoLabelSet, _, u64>(n, None)?;
            }
        }
        Ok(())
    }
}

/// The pods' label values. Each row is a pod: its name (a range of `text`), and indexes of its
/// namespace, owner and phase in `spans` (each a range of `text`, a value stored once) and of
/// its place in `places` (its node's name and the node's five labels, once per node). A row
/// takes 24 bytes; the table is rebuilt while the last one is served, so at a controller's
/// peak two are held.
#[derive(Debug, Default)]
struct PodRows {
    text: String,
    spans: Vec<(u32, u32)>,
    places: Vec<[u32; 6]>,
    rows: Vec<PodRow>,
    /// Values seen in this table (all but pod names), while it is built.
    seen: HashMap<String, u32>,
    /// Places by node name (the empty name for a pod on no node), while it is built.
    seen_places: HashMap<String, u32>,
}

/// One pod's row of a [`PodRows`].
#[derive(Debug, Clone, Copy)]
struct PodRow {
    name: (u32, u32),
    namespace: u32,
    owner: u32,
    place: u32,
    phase: u32,
}

impl PodRows {
    /// An empty table with room for `pods` and the values of `nodes` nodes: built at its final
    /// size, not grown by doubling and trimmed (the table is rebuilt while the last one is
    /// served, so its slack would be paid twice at the controller's peak).
    fn for_pods<'a>(pods: impl ExactSizeIterator<Item = &'a Arc<kerf_api::SlimPod>>, nodes: usize) -> PodRows {
        let count = pods.len();
        let names: usize = pods.map(|p| p.metadata.name.as_deref().map_or(0, str::len)).sum();
        // Shared values: each node's name and a few labels' values, and a few dozen others.
        let shared = nodes + 64;
        PodRows {
            text: String::with_capacity(names + shared * 48),
            spans: Vec::with_capacity(shared),
            places: Vec::with_capacity(nodes + 1),
            rows: Vec::with_capacity(count),
            seen: HashMap::with_capacity(shared),
            seen_places: HashMap::with_capacity(nodes + 1),
        }
    }

    fn text(&self, (start, end): (u32, u32)) -> &str {
        self.text.get(start as usize..end as usize).unwrap_or_default()
    }

    fn value(&self, i: u32) -> &str {
        self.text(self.spans.get(i as usize).copied().unwrap_or_default())
    }

    /// The label values of `row`, in the order of [`POD_LABELS`].
    fn values(&self, row: &PodRow) -> [&str; 10] {
        let place = self.places.get(row.place as usize).copied().unwrap_or_default();
        [
            self.text(row.name),
            self.value(row.namespace),
            self.value(row.owner),
            self.value(place[0]),
            self.value(place[1]),
            self.value(place[2]),
            self.value(place[3]),
            self.value(place[4]),
            self.value(place[5]),
            self.value(row.phase),
        ]
    }

    fn add(&mut self, v: &str) -> (u32, u32) {
        let start = self.text.len() as u32;
        self.text.push_str(v);
        (start, self.text.len() as u32)
    }

    fn shared(&mut self, v: &str) -> u32 {
        if let Some(&i) = self.seen.get(v) {
            return i;
        }
        let span = self.add(v);
        self.spans.push(span);
        let i = (self.spans.len() - 1) as u32;
        self.seen.insert(v.to_string(), i);
        i
    }

    /// The place of a pod on `node` (or on none): the node's name and labels, once per node.
    fn place(&mut self, node: Option<&k8s_openapi::api::core::v1::Node>) -> u32 {
        let name = node.and_then(|n| n.metadata.name.as_deref()).unwrap_or_default();
        if let Some(&i) = self.seen_places.get(name) {
            return i;
        }
        let node_labels = node.and_then(|n| n.metadata.labels.as_ref());
        let node_label = |k: &str| node_labels.and_then(|l| l.get(k)).map(String::as_str).unwrap_or_default();
        let place = [
            self.shared(name),
            self.shared(node_label(labels::NODE_POOL)),
            self.shared(node_label(labels::ZONE)),
            self.shared(node_label(labels::ARCH)),
            self.shared(node_label(labels::CAPACITY_TYPE)),
            self.shared(node_label(labels::INSTANCE_TYPE)),
        ];
        self.places.push(place);
        let i = (self.places.len() - 1) as u32;
        self.seen_places.insert(name.to_string(), i);
        i
    }

    fn push(&mut self, pod: &kerf_api::SlimPod, node: Option<&k8s_openapi::api::core::v1::Node>) {
        let owner = pod
            .metadata
            .owner_references()
            .iter()
            .find(|o| o.controller == Some(true))
            .map(|o| format!("{}/{}", o.kind, o.name))
            .unwrap_or_default();
        let row = PodRow {
            name: self.add(pod.metadata.name.as_deref().unwrap_or_default()),
            namespace: self.shared(pod.metadata.namespace.as_deref().unwrap_or_default()),
            owner: self.shared(&owner),
            place: self.place(node),
            phase: self.shared(pod.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("Pending")),
        };
        self.rows.push(row);
    }

    /// The table as it is kept: the build's indexes of values dropped, the rest trimmed.
    fn done(mut self) -> Self {
        self.seen = HashMap::new();
        self.seen_places = HashMap::new();
        self.text.shrink_to_fit();
        self.spans.shrink_to_fit();
        self.places.shrink_to_fit();
        self.rows.shrink_to_fit();
        self
    }
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
pub(crate) mod tests {
    use super::*;
    use kerf_api::cluster::Object;

    fn claim(name: &str) -> AnyObject {
        let c: kerf_api::NodeClaim = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": "default", "karpenter.sh/capacity-type": "spot", "topology.kubernetes.io/zone": "us-west-2a"}},
            "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}, "requirements": []}
        }))
        .expect("claim");
        c.into_any()
    }

    fn pod(name: &str, node: Option<&str>, phase: &str) -> kerf_api::SlimPod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "shop", "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d9", "uid": "u1", "controller": true}
            ]},
            "spec": {"nodeName": node, "containers": [{"name": "app"}]},
            "status": {"phase": phase}
        }))
        .expect("pod")
    }

    /// A registry holding `karpenter_pods_state` of `pods`, those bound to it on `node`.
    pub(crate) fn pods_state_registry(pods: &[kerf_api::SlimPod], node: &k8s_openapi::api::core::v1::Node) -> Registry {
        let state = Arc::new(PodsState::default());
        state.set(rows_of(pods, node).done());
        let mut registry = Registry::default();
        registry.register_collector(Box::new(state));
        registry
    }

    fn rows_of(pods: &[kerf_api::SlimPod], node: &k8s_openapi::api::core::v1::Node) -> PodRows {
        let mut rows = PodRows::default();
        for p in pods {
            let on = p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == node.metadata.name.as_deref();
            rows.push(p, on.then_some(node));
        }
        rows
    }

    pub(crate) fn node_n1() -> k8s_openapi::api::core::v1::Node {
        serde_json::from_value(serde_json::json!({"metadata": {"name": "n1", "labels": {
            "karpenter.sh/nodepool": "default", "topology.kubernetes.io/zone": "us-west-2a",
            "kubernetes.io/arch": "amd64", "karpenter.sh/capacity-type": "spot",
            "node.kubernetes.io/instance-type": "m5.large"
        }}}))
        .expect("node")
    }

    #[test]
    fn pods_state_has_a_series_per_pod_labeled_by_its_owner_node_and_phase() {
        let pods = [pod("web-1", Some("n1"), "Running"), pod("web-2", None, "Pending")];
        let text = encode(&pods_state_registry(&pods, &node_n1()));
        let series: Vec<&str> = text.lines().filter(|l| l.starts_with("karpenter_pods_state{")).collect();
        assert_eq!(
            series,
            [
                r#"karpenter_pods_state{name="web-1",namespace="shop",owner="ReplicaSet/web-7d9",node="n1",nodepool="default",zone="us-west-2a",arch="amd64",capacity_type="spot",instance_type="m5.large",phase="Running"} 1"#,
                r#"karpenter_pods_state{name="web-2",namespace="shop",owner="ReplicaSet/web-7d9",node="",nodepool="",zone="",arch="",capacity_type="",instance_type="",phase="Pending"} 1"#,
            ],
            "{text}"
        );
        assert!(text.contains("# TYPE karpenter_pods_state gauge"), "{text}");
    }

    #[test]
    fn pods_state_keeps_each_repeated_value_once() {
        let pods: Vec<_> = (0..100).map(|i| pod(&format!("web-{i}"), Some("n1"), "Running")).collect();
        let rows = rows_of(&pods, &node_n1()).done();
        // The namespace, owner, node, five node labels and phase once each; one place.
        assert_eq!(rows.spans.len(), 9);
        assert_eq!(rows.places.len(), 1);
        let names: usize = pods.iter().map(|p| p.metadata.name.as_deref().map_or(0, str::len)).sum();
        let shared =
            ["shop", "ReplicaSet/web-7d9", "n1", "default", "us-west-2a", "amd64", "spot", "m5.large", "Running"];
        assert_eq!(rows.text.len(), names + shared.iter().map(|v| v.len()).sum::<usize>());
        assert_eq!(std::mem::size_of::<PodRow>(), 24);
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

    #[test]
    fn repairs_count_replacements_and_reboots_by_condition_pool_capacity_type_and_image_once_each() {
        let repair = |action, claim: &str| RepairRecord {
            at: kerf_cloud::Timestamp::UNIX_EPOCH,
            action,
            node_claim: claim.to_string(),
            node: format!("node-{claim}"),
            node_pool: "gpu".to_string(),
            capacity_type: "on-demand".to_string(),
            image_id: "ami-1".to_string(),
            condition: "AcceleratedHardwareReady",
            detail: String::new(),
        };
        let mut m = Metrics::new();
        let mut repairs = vec![repair(RepairAction::Reboot, "a")];
        m.count_repairs(&repairs);
        repairs.push(repair(RepairAction::Replace, "a"));
        m.count_repairs(&repairs);
        m.count_repairs(&repairs);
        let text = encode(&m.registry());
        let labels =
            r#"{condition="accelerated_hardware_ready",nodepool="gpu",capacity_type="on-demand",image_id="ami-1"}"#;
        assert!(text.contains(&format!("kerf_nodeclaims_unhealthy_rebooted_total{labels} 1")), "{text}");
        assert!(text.contains(&format!("karpenter_nodeclaims_unhealthy_disrupted_total{labels} 1")), "{text}");
    }

    #[test]
    fn consolidation_moves_and_balanced_scores_are_published_by_pool_policy_and_decision() {
        let mut counts = MoveCounts::default();
        counts.record("spot", "Balanced", true, Some(0.75));
        counts.record("spot", "Balanced", false, Some(0.08));
        counts.record("spot", "Balanced", false, Some(0.3));
        counts.record("od", "WhenEmptyOrUnderutilized", true, None);
        let mut what_if = WhatIfCounts::default();
        let score = |saved| kerf_controller::disruption::balanced::Score {
            pool: "od".into(),
            savings: saved,
            disruption: 0.5,
            saved,
        };
        what_if.record(&score(0.01), "WhenEmptyOrUnderutilized");
        what_if.record(&score(0.4), "WhenEmptyOrUnderutilized");
        let moves = Arc::new(ConsolidationMoves::default());
        moves.moves.set(&counts);
        moves.what_if.set(&what_if);
        let mut registry = Registry::default();
        registry.register_collector(Box::new(moves));
        let text = encode(&registry);
        for line in [
            r#"karpenter_consolidation_moves_total{decision="approved",nodepool="spot",policy="Balanced"} 1"#,
            r#"karpenter_consolidation_moves_total{decision="rejected",nodepool="spot",policy="Balanced"} 2"#,
            r#"karpenter_consolidation_moves_total{decision="approved",nodepool="od",policy="WhenEmptyOrUnderutilized"} 1"#,
            r#"karpenter_consolidation_score_bucket{le="0.1",decision="rejected",nodepool="spot",policy="Balanced"} 1"#,
            r#"karpenter_consolidation_score_bucket{le="0.5",decision="rejected",nodepool="spot",policy="Balanced"} 2"#,
            r#"karpenter_consolidation_score_count{decision="approved",nodepool="spot",policy="Balanced"} 1"#,
            r#"kerf_consolidation_balanced_what_if_total{decision="approved",nodepool="od",policy="WhenEmptyOrUnderutilized"} 1"#,
            r#"kerf_consolidation_balanced_what_if_total{decision="rejected",nodepool="od",policy="WhenEmptyOrUnderutilized"} 1"#,
        ] {
            assert!(text.contains(line), "{line} missing from:\n{text}");
        }
    }

    #[test]
    fn disrupted_claims_and_pods_are_published_with_policy_and_termination_mode() {
        let consolidated = DisruptionLabels::new(
            kerf_controller::disruption::Reason::Underutilized,
            Some(kerf_api::nodepool::ConsolidationPolicy::Balanced),
            "spot",
            "spot",
            false,
        );
        let repaired =
            DisruptionLabels::new(kerf_controller::disruption::Reason::Unhealthy, None, "od", "on-demand", false);
        let mut counts = DisruptionCounts::default();
        counts.initiated(&consolidated, 4);
        counts.disrupted(&consolidated, 4);
        counts.initiated(&repaired, 2);
        let collector = Arc::new(Disrupted::default());
        collector.0.set(&counts);
        let mut registry = Registry::default();
        registry.register_collector(Box::new(collector));
        let text = encode(&registry);
        for line in [
            r#"karpenter_nodeclaims_disrupted_total{reason="underutilized",nodepool="spot",capacity_type="spot",consolidation_policy="balanced",termination_mode="graceful"} 1"#,
            r#"karpenter_pods_disruption_initiated_total{reason="underutilized",nodepool="spot",capacity_type="spot",consolidation_policy="balanced",termination_mode="graceful"} 4"#,
            r#"karpenter_pods_disrupted_total{reason="underutilized",nodepool="spot",capacity_type="spot",consolidation_policy="balanced",termination_mode="graceful"} 4"#,
            r#"karpenter_nodeclaims_disrupted_total{reason="unhealthy",nodepool="od",capacity_type="on-demand",consolidation_policy="",termination_mode="forceful"} 1"#,
            r#"karpenter_pods_disruption_initiated_total{reason="unhealthy",nodepool="od",capacity_type="on-demand",consolidation_policy="",termination_mode="forceful"} 2"#,
        ] {
            assert!(text.contains(line), "{line} missing from:\n{text}");
        }
        assert!(!text.contains(r#"karpenter_pods_disrupted_total{reason="unhealthy""#), "{text}");
    }
}
