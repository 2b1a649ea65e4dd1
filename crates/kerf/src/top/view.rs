//! `kerf top`'s model of one screen: the [`Frame`] a [`Fleet`] shows under the viewer's
//! [`Options`] (sort, filter, node selector, the selected node) at an instant. The cluster line,
//! the NodePools, the node rows (sorted and filtered), the pending pods grouped by owner with
//! kerf's reason, the CapacityBuffers and the selected node's pods all come from here; the
//! terminal drawing, the `--once` text and the `--json` output render the same frame.
//!
//! A node's price is its offering's list price after the cluster's NodeOverlays, through
//! `kerf_api::overlay` as the cloud provider prices a running instance (docs/design.md,
//! "NodeOverlay"); pool and cluster costs add those prices up. Consolidation reversals come
//! from what kerf writes into the cluster: `ConsolidationReversed` events on NodePools, and the
//! `kerf.sh/consolidation-reversed` annotation on the NodeClaims it holds.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::str::FromStr;
use std::sync::Arc;

use kerf_api::labels;
use kerf_api::nodepool::DisruptionReason;
use kerf_api::overlay::NodeOverlays;
use kerf_api::{InstanceType, Offering, ResourceList};
use kerf_apiserver::selectors::LabelSelector;
use kerf_cloud::Timestamp;
use serde::Serialize;

use super::fleet::{ClaimFacts, EventFacts, Fleet, Load, NodeFacts};

/// Hours in a month, as cloud bills count them.
pub const HOURS_PER_MONTH: f64 = 730.0;

/// How far back a NodePool's `ConsolidationReversed` events count as recent reversals: the
/// time an API server keeps events by default (`--event-ttl`).
pub const REVERSALS_WINDOW_SECONDS: i64 = 3600;

/// What the node list is sorted by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sort {
    Name,
    NodePool,
    Type,
    Zone,
    Capacity,
    Price,
    Pods,
    Age,
    State,
    /// The share of a resource's allocatable that pods request.
    Use(String),
}

impl Sort {
    /// The order the sort key cycles through (`s` in the terminal), for the given resources.
    pub fn cycle(resources: &[String]) -> Vec<Sort> {
        let mut all = vec![Sort::Name, Sort::NodePool, Sort::Type, Sort::Zone, Sort::Capacity, Sort::Price];
        all.extend(resources.iter().map(|r| Sort::Use(r.clone())));
        all.extend([Sort::Pods, Sort::Age, Sort::State]);
        all
    }

    pub fn name(&self) -> String {
        match self {
            Sort::Name => "name".into(),
            Sort::NodePool => "nodepool".into(),
            Sort::Type => "type".into(),
            Sort::Zone => "zone".into(),
            Sort::Capacity => "capacity".into(),
            Sort::Price => "price".into(),
            Sort::Pods => "pods".into(),
            Sort::Age => "age".into(),
            Sort::State => "state".into(),
            Sort::Use(r) => r.clone(),
        }
    }
}

impl FromStr for Sort {
    type Err = String;
    fn from_str(s: &str) -> Result<Sort, String> {
        Ok(match s {
            "name" => Sort::Name,
            "nodepool" | "pool" => Sort::NodePool,
            "type" | "instance-type" => Sort::Type,
            "zone" => Sort::Zone,
            "capacity" | "capacity-type" => Sort::Capacity,
            "price" | "cost" => Sort::Price,
            "pods" => Sort::Pods,
            "age" => Sort::Age,
            "state" => Sort::State,
            r if !r.is_empty() && r.chars().all(|c| c.is_ascii_alphanumeric() || "./-_".contains(c)) => {
                Sort::Use(r.to_string())
            }
            other => {
                return Err(format!(
                    "{other:?} is not a sort field (name, nodepool, type, zone, capacity, price, pods, age, state, or a resource such as cpu)"
                ));
            }
        })
    }
}

/// How the viewer looks at the fleet.
#[derive(Debug, Clone)]
pub struct Options {
    /// Resources with a bar, in order (`cpu,memory` by default).
    pub resources: Vec<String>,
    pub sort: Sort,
    /// Reverses the sort's natural order.
    pub reverse: bool,
    /// Only nodes whose name, NodePool, type, zone, capacity type or state contains it.
    pub filter: String,
    /// Only nodes with matching labels.
    pub node_selector: Option<LabelSelector>,
    /// The node whose pods and reason are shown.
    pub selected: Option<String>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            resources: vec!["cpu".to_string(), "memory".to_string()],
            sort: Sort::Name,
            reverse: false,
            filter: String::new(),
            node_selector: None,
            selected: None,
        }
    }
}

/// The list $/hour of an instance: `(instance type, capacity type, zone, region)`, and the
/// instance type as the cloud lists it in a region (its labels are what NodeOverlays select by).
pub trait Prices {
    fn price(&self, instance_type: &str, capacity_type: &str, zone: &str, region: Option<&str>) -> Option<f64>;
    fn instance_type(&self, name: &str, region: &str) -> Option<InstanceType>;
}

/// The region of a zone, unless the node's `topology.kubernetes.io/region` says it: a zone is
/// its region and a letter (us-west-2a).
fn region_of(zone: &str, region: Option<&str>) -> Option<String> {
    region.map(str::to_string).or_else(|| {
        let trimmed = zone.trim_end_matches(|c: char| c.is_ascii_lowercase());
        (trimmed.len() + 1 == zone.len()).then(|| trimmed.to_string())
    })
}

/// Prices from kerf's built-in AWS catalog: the region's on-demand price, the catalog's spot
/// model for spot (the prices `kerf simulate` and `kerf serve` charge). Reserved capacity and
/// types outside the catalog are not priced.
pub struct CatalogPrices;

impl Prices for CatalogPrices {
    fn price(&self, instance_type: &str, capacity_type: &str, zone: &str, region: Option<&str>) -> Option<f64> {
        let catalog = kerf_cloud::aws::catalog::catalog().ok()?;
        let region = region_of(zone, region)?;
        let offers = catalog.offers(&region).ok()?;
        let i = offers.binary_search_by(|o| o.instance_type.as_str().cmp(instance_type)).ok()?;
        let on_demand = offers[i].price;
        match capacity_type {
            labels::CAPACITY_TYPE_ON_DEMAND => Some(on_demand),
            labels::CAPACITY_TYPE_SPOT => Some(kerf_cloud::aws::catalog::spot_price(instance_type, zone, on_demand)),
            _ => None,
        }
    }

    fn instance_type(&self, name: &str, region: &str) -> Option<InstanceType> {
        let catalog = kerf_cloud::aws::catalog::catalog().ok()?;
        catalog.instance_type(region, name, &kerf_cloud::aws::NodeClassSettings::default()).ok()
    }
}

/// A node's $/hour after NodeOverlays.
#[derive(Debug, Clone, PartialEq)]
pub struct Price {
    pub price: f64,
    /// The catalog's price.
    pub list_price: f64,
    /// The NodeOverlay that set the price, if one did.
    pub overlay: Option<String>,
}

/// Requested against allocatable (or used against a limit) of one resource.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Use {
    pub resource: String,
    pub used: f64,
    /// `None`: no allocatable (a launching node) or no limit.
    pub of: Option<f64>,
}

impl Use {
    /// The share used, 0..=1 (more when over).
    pub fn fraction(&self) -> Option<f64> {
        self.of.filter(|of| *of > 0.0).map(|of| self.used / of)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterLine {
    pub nodes: usize,
    /// NodeClaims without a node yet (counted in `nodes` too).
    pub launching: usize,
    pub resources: Vec<Use>,
    pub cost_per_hour: f64,
    pub cost_per_month: f64,
    /// Nodes whose price kerf's catalog does not know (left out of the cost).
    pub unpriced: usize,
    /// Nodes priced by a NodeOverlay rather than the catalog's list price.
    pub overlay_priced: usize,
    pub pods_running: usize,
    pub pods_pending: usize,
    pub pods_bound_not_started: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolRow {
    pub name: String,
    pub nodes: usize,
    /// The pool's resources (its status) against its limits, for the viewer's resources and
    /// every limited one.
    pub limits: Vec<Use>,
    pub cost_per_hour: f64,
    /// Nodes of the pool being disrupted now.
    pub disrupting: usize,
    /// How many more its budgets let go now (the tightest over the reasons).
    pub allowed_disruptions: Option<usize>,
    /// Consolidations of the pool undone in the last hour (its `ConsolidationReversed` events).
    pub reversals: usize,
}

/// A node's state, most pressing first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum State {
    NotReady,
    Disrupting,
    Deleting,
    Launching,
    Cordoned,
    Ready,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::Ready => "Ready",
            State::NotReady => "NotReady",
            State::Cordoned => "cordoned",
            State::Disrupting => "disrupting",
            State::Deleting => "deleting",
            State::Launching => "launching",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeRow {
    /// The node's name, or the NodeClaim's while it has no node.
    pub name: String,
    pub node_claim: Option<String>,
    pub node_pool: Option<String>,
    pub instance_type: Option<String>,
    pub zone: Option<String>,
    pub capacity_type: Option<String>,
    pub price_per_hour: Option<f64>,
    /// The catalog's price, when a NodeOverlay set `price_per_hour`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub list_price_per_hour: Option<f64>,
    /// The NodeOverlay that set its price.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_overlay: Option<String>,
    pub resources: Vec<Use>,
    pub pods: usize,
    pub age_seconds: Option<i64>,
    pub state: State,
    /// Why kerf is removing it (disrupting), or why kerf keeps it (its latest `DisruptionBlocked`).
    pub reason: Option<String>,
    /// It took part in a consolidation that was undone: when (its NodeClaim's
    /// `kerf.sh/consolidation-reversed`), and the NodePool's `ConsolidationReversed` event about
    /// that decision when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reversal: Option<String>,
}

/// Pending pods of one owner.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingGroup {
    pub namespace: String,
    /// `Deployment web`, `Pod name` for a pod of its own.
    pub owner: String,
    pub pods: usize,
    /// kerf's reason (its `FailedScheduling` event), else kube-scheduler's, else what it waits for.
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BufferRow {
    pub namespace: String,
    pub name: String,
    pub wanted: String,
    /// Chunks of room resolved.
    pub chunks: Option<i32>,
    /// `True` once all the room exists; the message otherwise.
    pub provisioning: Option<String>,
    pub detail: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodLine {
    pub namespace: String,
    pub name: String,
    pub phase: String,
    pub owner: Option<String>,
    pub requests: Vec<Use>,
}

/// The selected node: its row, and its pods.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Detail {
    pub node: NodeRow,
    pub provider_id: Option<String>,
    pub pods: Vec<PodLine>,
}

/// One screen.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Frame {
    pub cluster: ClusterLine,
    pub node_pools: Vec<PoolRow>,
    pub nodes: Vec<NodeRow>,
    pub pending: Vec<PendingGroup>,
    pub buffers: Vec<BufferRow>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub selected: Option<Detail>,
    pub sort: String,
    /// Kinds the cluster does not serve, and why.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub absent: BTreeMap<String, String>,
}

fn age(created: Option<Timestamp>, now: Timestamp) -> Option<i64> {
    created.map(|c| (now.as_second() - c.as_second()).max(0))
}

/// The message of the latest event per object, karpenter's before anyone else's.
fn latest_by_object<'a>(
    events: impl Iterator<Item = &'a EventFacts>,
    reason: impl Fn(&str) -> bool,
) -> HashMap<&'a str, &'a EventFacts> {
    let mut out: HashMap<&str, &EventFacts> = HashMap::new();
    for e in events.filter(|e| reason(&e.reason)) {
        let rank = |e: &EventFacts| (e.component == kerf_kube::api::COMPONENT, e.at);
        match out.get(e.object.as_str()) {
            Some(have) if rank(have) >= rank(e) => {}
            _ => {
                out.insert(e.object.as_str(), e);
            }
        }
    }
    out
}

/// `Cannot disrupt Node: why` reads as `why`.
fn blocked_reason(message: &str) -> String {
    message.strip_prefix("Cannot disrupt Node: ").unwrap_or(message).to_string()
}

fn uses(resources: &[String], requested: &ResourceList, allocatable: Option<&ResourceList>) -> Vec<Use> {
    resources
        .iter()
        .map(|r| Use {
            resource: r.clone(),
            used: requested.get(r).as_f64(),
            of: allocatable.map(|a| a.get(r).as_f64()),
        })
        .collect()
}

struct Builder<'a> {
    fleet: &'a Fleet,
    opts: &'a Options,
    prices: &'a dyn Prices,
    now: Timestamp,
    blocked: HashMap<&'a str, &'a EventFacts>,
    /// The latest `DisruptionTerminating` event per node: why it is being removed, when its
    /// NodeClaim does not say.
    terminating: HashMap<&'a str, &'a EventFacts>,
    overlays: &'a NodeOverlays,
    /// The cloud's instance types by (region, name), read once a frame when overlays apply.
    types: RefCell<TypesByRegion>,
}

/// Instance types by (region, name); `None` for one the cloud does not list there.
type TypesByRegion = HashMap<(String, String), Option<Arc<InstanceType>>>;

impl<'a> Builder<'a> {
    /// The instance's price: the catalog's for its offering, after the cluster's NodeOverlays
    /// seen from its labels and its claim's single-valued requirements, as the cloud provider
    /// reprices a running instance.
    fn price(&self, labels: &BTreeMap<String, String>, claim: Option<&ClaimFacts>) -> Option<Price> {
        fn get<'x>(
            labels: &'x BTreeMap<String, String>,
            label: &str,
            from_claim: Option<&'x String>,
        ) -> Option<&'x str> {
            labels.get(label).or(from_claim).map(String::as_str)
        }
        let it = get(labels, labels::INSTANCE_TYPE, claim.and_then(|c| c.instance_type.as_ref()))?;
        let ct = get(labels, labels::CAPACITY_TYPE, claim.and_then(|c| c.capacity_type.as_ref()))?;
        let zone = get(labels, labels::ZONE, claim.and_then(|c| c.zone.as_ref()))?;
        let region = labels.get(labels::REGION).map(String::as_str);
        let list = self.prices.price(it, ct, zone, region)?;
        let listed = Price { price: list, list_price: list, overlay: None };
        if self.overlays.is_empty() {
            return Some(listed);
        }
        let Some(region) = region_of(zone, region) else { return Some(listed) };
        let t = self
            .types
            .borrow_mut()
            .entry((region.clone(), it.to_string()))
            .or_insert_with(|| self.prices.instance_type(it, &region).map(Arc::new))
            .clone();
        let Some(t) = t else { return Some(listed) };
        let offering = Offering {
            zone: zone.to_string(),
            capacity_type: ct.to_string(),
            price: list,
            available: true,
            reservation: None,
        };
        let mut context = claim.map(|c| c.requirement_labels.clone()).unwrap_or_default();
        context.extend(labels.iter().map(|(k, v)| (k.clone(), v.clone())));
        if let Some(c) = claim {
            // A launching claim's labels, as its node will carry them.
            for (k, v) in [
                (labels::NODE_POOL, &c.node_pool),
                (labels::INSTANCE_TYPE, &c.instance_type),
                (labels::ZONE, &c.zone),
                (labels::CAPACITY_TYPE, &c.capacity_type),
            ] {
                if let Some(v) = v {
                    context.entry(k.to_string()).or_insert_with(|| v.clone());
                }
            }
        }
        let p = self.overlays.offering_price(&t, &offering, &context);
        Some(Price { price: p.price, list_price: p.list_price, overlay: p.overlay.map(str::to_string) })
    }

    /// The reversal a node's claim took part in: its hold, and the pool's event about that
    /// decision (the event names the decision's time as the hold does).
    fn reversal(&self, claim: Option<&ClaimFacts>, pool: Option<&String>) -> Option<String> {
        let c = claim?;
        let hold = c.reversed.as_deref()?;
        let mut out = format!(
            "consolidation reversed ({}: {hold}): kerf leaves it alone until the workload shrinks",
            labels::CONSOLIDATION_REVERSED
        );
        let decided = hold.split_once(" decided ").map(|(_, d)| d.trim());
        let event = self
            .fleet
            .pool_events
            .values()
            .filter(|e| Some(&e.object) == pool)
            .filter(|e| {
                e.message.contains(&format!("NodeClaim {} ", c.name))
                    || decided.is_some_and(|d| e.message.contains(&format!("decided at {d} ")))
            })
            .max_by_key(|e| e.at);
        if let Some(e) = event {
            out.push_str("; ");
            out.push_str(&e.message);
        }
        Some(out)
    }

    fn node_row(&self, node: &NodeFacts, claim: Option<&ClaimFacts>) -> NodeRow {
        let none = Load::default();
        let load = self.fleet.loads.get(&node.name).unwrap_or(&none);
        let label = |k: &str, c: Option<&String>| node.labels.get(k).or(c).cloned();
        let disruption = claim.and_then(|c| c.disruption.clone());
        let state = if node.ready != Some(true) && !node.deleting && !node.disrupted {
            State::NotReady
        } else if node.disrupted || disruption.is_some() {
            State::Disrupting
        } else if node.deleting || claim.is_some_and(|c| c.deleting) {
            State::Deleting
        } else if node.unschedulable {
            State::Cordoned
        } else {
            State::Ready
        };
        let reason = match state {
            State::Disrupting | State::Deleting => disruption.or_else(|| {
                let m = &self.terminating.get(node.name.as_str())?.message;
                Some(m.strip_prefix("Disrupting Node: ").unwrap_or(m).to_string())
            }),
            _ => self.blocked.get(node.name.as_str()).map(|e| blocked_reason(&e.message)),
        };
        let price = self.price(&node.labels, claim);
        let node_pool = label(labels::NODE_POOL, claim.and_then(|c| c.node_pool.as_ref()));
        let reversal = self.reversal(claim, node_pool.as_ref());
        NodeRow {
            name: node.name.clone(),
            node_claim: claim.map(|c| c.name.clone()),
            node_pool,
            instance_type: label(labels::INSTANCE_TYPE, claim.and_then(|c| c.instance_type.as_ref())),
            zone: label(labels::ZONE, claim.and_then(|c| c.zone.as_ref())),
            capacity_type: label(labels::CAPACITY_TYPE, claim.and_then(|c| c.capacity_type.as_ref())),
            price_per_hour: price.as_ref().map(|p| p.price),
            list_price_per_hour: price.as_ref().filter(|p| p.overlay.is_some()).map(|p| p.list_price),
            node_overlay: price.and_then(|p| p.overlay),
            resources: uses(&self.opts.resources, &load.requested, Some(&node.allocatable)),
            pods: load.pods,
            age_seconds: age(node.created, self.now),
            state,
            reason,
            reversal,
        }
    }

    fn launching_row(&self, claim: &ClaimFacts) -> NodeRow {
        let price = self.price(&BTreeMap::new(), Some(claim));
        NodeRow {
            name: claim.name.clone(),
            node_claim: Some(claim.name.clone()),
            node_pool: claim.node_pool.clone(),
            instance_type: claim.instance_type.clone(),
            zone: claim.zone.clone(),
            capacity_type: claim.capacity_type.clone(),
            price_per_hour: price.as_ref().map(|p| p.price),
            list_price_per_hour: price.as_ref().filter(|p| p.overlay.is_some()).map(|p| p.list_price),
            node_overlay: price.and_then(|p| p.overlay),
            reversal: self.reversal(Some(claim), claim.node_pool.as_ref()),
            resources: uses(&self.opts.resources, &ResourceList::new(), None),
            pods: 0,
            age_seconds: age(claim.created, self.now),
            state: if claim.deleting { State::Deleting } else { State::Launching },
            reason: claim.disruption.clone().or_else(|| claim.not_launched.clone()),
        }
    }
}

fn shown(row: &NodeRow, filter: &str) -> bool {
    if filter.is_empty() {
        return true;
    }
    let f = filter.to_lowercase();
    [Some(&row.name), row.node_pool.as_ref(), row.instance_type.as_ref(), row.zone.as_ref(), row.capacity_type.as_ref()]
        .into_iter()
        .flatten()
        .any(|s| s.to_lowercase().contains(&f))
        || row.state.as_str().to_lowercase().contains(&f)
}

fn sort_rows(rows: &mut [NodeRow], sort: &Sort, reverse: bool) {
    fn text(v: &Option<String>) -> &str {
        v.as_deref().unwrap_or("")
    }
    let key_f64 = |r: &NodeRow| -> f64 {
        match sort {
            Sort::Price => r.price_per_hour.unwrap_or(-1.0),
            Sort::Pods => r.pods as f64,
            Sort::Age => r.age_seconds.unwrap_or(-1) as f64,
            Sort::Use(res) => r.resources.iter().find(|u| &u.resource == res).and_then(Use::fraction).unwrap_or(-1.0),
            _ => 0.0,
        }
    };
    rows.sort_by(|a, b| {
        let primary = match sort {
            Sort::Name => std::cmp::Ordering::Equal,
            Sort::NodePool => text(&a.node_pool).cmp(text(&b.node_pool)),
            Sort::Type => text(&a.instance_type).cmp(text(&b.instance_type)),
            Sort::Zone => text(&a.zone).cmp(text(&b.zone)),
            Sort::Capacity => text(&a.capacity_type).cmp(text(&b.capacity_type)),
            Sort::State => a.state.cmp(&b.state),
            _ => key_f64(b).total_cmp(&key_f64(a)),
        };
        let primary = if reverse { primary.reverse() } else { primary };
        // Ties (and the name sort) by name, always ascending so a list reads stably.
        let by_name = a.name.cmp(&b.name);
        primary.then(if reverse && *sort == Sort::Name { by_name.reverse() } else { by_name })
    });
}

/// The frame `fleet` shows under `opts` at `now`.
pub fn frame(fleet: &Fleet, opts: &Options, prices: &dyn Prices, now: Timestamp) -> Frame {
    let blocked = latest_by_object(fleet.node_events.values(), |r| r == "DisruptionBlocked");
    let terminating = latest_by_object(fleet.node_events.values(), |r| r == "DisruptionTerminating");
    let b = Builder {
        fleet,
        opts,
        prices,
        now,
        blocked,
        terminating,
        overlays: &fleet.overlay_set,
        types: RefCell::new(HashMap::new()),
    };

    // Claims by the node they launched, and by provider id for nodes their claim does not name yet.
    let mut claim_of_node: HashMap<&str, &ClaimFacts> = HashMap::new();
    let mut claim_of_provider: HashMap<&str, &ClaimFacts> = HashMap::new();
    for c in fleet.claims.values() {
        if let Some(n) = &c.node {
            claim_of_node.insert(n.as_str(), c);
        }
        if let Some(p) = &c.provider_id {
            claim_of_provider.insert(p.as_str(), c);
        }
    }
    let selected_by =
        |labels: &BTreeMap<String, String>| opts.node_selector.as_ref().is_none_or(|s| s.matches(Some(labels)));
    let mut all_rows = Vec::new();
    let mut seen_claims = std::collections::HashSet::new();
    for node in fleet.nodes.values().filter(|n| selected_by(&n.labels)) {
        let claim = claim_of_node
            .get(node.name.as_str())
            .or_else(|| node.provider_id.as_deref().and_then(|p| claim_of_provider.get(p)))
            .copied();
        if let Some(c) = claim {
            seen_claims.insert(c.name.as_str());
        }
        all_rows.push(b.node_row(node, claim));
    }
    for claim in fleet.claims.values().filter(|c| !seen_claims.contains(c.name.as_str())) {
        // A claim whose node is not shown by the selector: judged by the labels it will carry.
        let claim_labels: BTreeMap<String, String> = [
            (labels::NODE_POOL, &claim.node_pool),
            (labels::INSTANCE_TYPE, &claim.instance_type),
            (labels::ZONE, &claim.zone),
            (labels::CAPACITY_TYPE, &claim.capacity_type),
        ]
        .into_iter()
        .filter_map(|(k, v)| Some((k.to_string(), v.clone()?)))
        .collect();
        if claim.node.as_ref().is_some_and(|n| fleet.nodes.contains_key(n)) || !selected_by(&claim_labels) {
            continue;
        }
        all_rows.push(b.launching_row(claim));
    }

    // The cluster line, over every selected node (the filter only narrows the list).
    let mut requested = ResourceList::new();
    let mut allocatable = ResourceList::new();
    let (mut running, mut starting) = (0, 0);
    for node in fleet.nodes.values().filter(|n| selected_by(&n.labels)) {
        allocatable.add(&node.allocatable);
        if let Some(load) = fleet.loads.get(&node.name) {
            requested.add(&load.requested);
            running += load.running;
            starting += load.starting;
        }
    }
    // `+ 0.0`: an empty sum is -0.0.
    let cost: f64 = all_rows.iter().filter_map(|r| r.price_per_hour).sum::<f64>() + 0.0;
    let cluster = ClusterLine {
        nodes: all_rows.len(),
        launching: all_rows.iter().filter(|r| r.state == State::Launching).count(),
        resources: uses(&opts.resources, &requested, Some(&allocatable)),
        cost_per_hour: cost,
        cost_per_month: cost * HOURS_PER_MONTH,
        unpriced: all_rows.iter().filter(|r| r.price_per_hour.is_none()).count(),
        overlay_priced: all_rows.iter().filter(|r| r.node_overlay.is_some()).count(),
        pods_running: running,
        pods_pending: fleet.unbound.len(),
        pods_bound_not_started: starting,
    };

    let node_pools = pools(&b, &all_rows);
    let pending = pending(fleet);
    let buffers = fleet
        .buffers
        .values()
        .map(|f| BufferRow {
            namespace: f.namespace.clone(),
            name: f.name.clone(),
            wanted: f.wanted.clone(),
            chunks: f.chunks,
            provisioning: f.provisioning.as_ref().map(|(s, m)| if s == "True" { s.clone() } else { m.clone() }),
            detail: f.not_ready.clone(),
        })
        .collect();

    let selected = opts.selected.as_ref().and_then(|name| {
        let row = all_rows.iter().find(|r| &r.name == name)?.clone();
        let mut pods: Vec<PodLine> = fleet
            .pods
            .values()
            .filter(|p| !p.finished && p.node.as_ref() == Some(name))
            .map(|p| PodLine {
                namespace: p.namespace.clone(),
                name: p.name.clone(),
                phase: p.phase.clone(),
                owner: p.owner.clone(),
                requests: uses(&opts.resources, &p.requests, None),
            })
            .collect();
        pods.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        Some(Detail { provider_id: fleet.nodes.get(name).and_then(|n| n.provider_id.clone()), node: row, pods })
    });

    let mut nodes: Vec<NodeRow> = all_rows.into_iter().filter(|r| shown(r, &opts.filter)).collect();
    sort_rows(&mut nodes, &opts.sort, opts.reverse);
    Frame {
        cluster,
        node_pools,
        nodes,
        pending,
        buffers,
        selected,
        sort: format!("{}{}", opts.sort.name(), if opts.reverse { " (reversed)" } else { "" }),
        absent: fleet.absent.iter().map(|(k, v)| (k.name().to_string(), v.clone())).collect(),
    }
}

fn pools(b: &Builder<'_>, rows: &[NodeRow]) -> Vec<PoolRow> {
    let mut names: Vec<&str> = b.fleet.pools.keys().map(String::as_str).collect();
    for r in rows {
        if let Some(p) = &r.node_pool
            && !names.contains(&p.as_str())
        {
            names.push(p);
        }
    }
    names.sort();
    names
        .into_iter()
        .map(|name| {
            let its: Vec<&NodeRow> = rows.iter().filter(|r| r.node_pool.as_deref() == Some(name)).collect();
            let disrupting = its.iter().filter(|r| matches!(r.state, State::Disrupting | State::Deleting)).count();
            let pool = b.fleet.pools.get(name);
            let limits = pool
                .map(|p| {
                    let used = p.status.as_ref().map(|s| s.resources.clone()).unwrap_or_default();
                    let limit = p.spec.limits.clone().unwrap_or_default();
                    let mut names: Vec<String> = b.opts.resources.clone();
                    names.extend(limit.iter().map(|(k, _)| k.clone()).filter(|k| !b.opts.resources.contains(k)));
                    names
                        .into_iter()
                        .map(|r| Use {
                            used: if r == kerf_api::resources::NODES {
                                its.len() as f64
                            } else {
                                used.get(&r).as_f64()
                            },
                            of: limit.0.get(&r).map(|q| q.as_f64()),
                            resource: r,
                        })
                        .collect()
                })
                .unwrap_or_default();
            let allowed = pool.map(|p| {
                [DisruptionReason::Empty, DisruptionReason::Underutilized, DisruptionReason::Drifted]
                    .into_iter()
                    .map(|reason| p.allowed_disruptions(b.now, its.len(), reason))
                    .min()
                    .unwrap_or(0)
                    .saturating_sub(disrupting)
            });
            let since = b.now.as_second() - REVERSALS_WINDOW_SECONDS;
            let reversals = b
                .fleet
                .pool_events
                .values()
                .filter(|e| e.object == name && e.at.is_none_or(|at| at.as_second() >= since))
                .map(|e| e.count as usize)
                .sum();
            PoolRow {
                name: name.to_string(),
                nodes: its.len(),
                limits,
                cost_per_hour: its.iter().filter_map(|r| r.price_per_hour).sum(),
                disrupting,
                allowed_disruptions: allowed,
                reversals,
            }
        })
        .collect()
}

/// A group's pods, and its most telling reason with its rank.
type Group = (usize, Option<(u8, String)>);

/// Pending pods (no node) grouped by namespace and owner, largest group first.
fn pending(fleet: &Fleet) -> Vec<PendingGroup> {
    let failed = latest_by_object(fleet.pod_events.values(), |r| r == "FailedScheduling");
    let mut groups: BTreeMap<(String, String), Group> = BTreeMap::new();
    for (key, p) in fleet.unbound.iter().filter_map(|k| Some((k, fleet.pods.get(k)?))) {
        let owner = p.owner.clone().unwrap_or_else(|| format!("Pod {}", p.name));
        // The reason: kerf's own, else kube-scheduler's, else what the pod waits for. Within a
        // group, the most telling one of its pods.
        let reason = match failed.get(key.as_str()) {
            Some(e) if e.component == kerf_kube::api::COMPONENT => (3, e.message.clone()),
            Some(e) => (2, e.message.clone()),
            None => match (&p.unschedulable, &p.nominated) {
                (Some(m), _) => (2, m.clone()),
                (None, Some(n)) => (1, format!("nominated to {n}, waiting for it")),
                (None, None) => (0, "not scheduled yet".to_string()),
            },
        };
        let g = groups.entry((p.namespace.clone(), owner)).or_insert((0, None));
        g.0 += 1;
        if g.1.as_ref().is_none_or(|(rank, msg)| reason.0 > *rank || (reason.0 == *rank && reason.1 < *msg)) {
            g.1 = Some(reason);
        }
    }
    let mut out: Vec<PendingGroup> = groups
        .into_iter()
        .map(|((namespace, owner), (pods, reason))| PendingGroup {
            namespace,
            owner,
            pods,
            reason: reason.map(|r| r.1).unwrap_or_default(),
        })
        .collect();
    out.sort_by(|a, b| b.pods.cmp(&a.pods).then_with(|| (&a.namespace, &a.owner).cmp(&(&b.namespace, &b.owner))));
    out
}

#[cfg(test)]
#[path = "view_tests.rs"]
mod tests;
