//! A stand-in for the kubelet (and the node lifecycle controller): once an instance's launch
//! latency has passed, its Node registers Ready with the NodeClaim's labels and taints (startup
//! taints and `karpenter.sh/unregistered` included); startup taints are lifted a few seconds
//! later, as the agents that own them would; a terminated instance's Node goes NotReady. A
//! rebooted instance's Node turns `Ready` `Unknown` (its kubelet stops posting) and, once the
//! instance is back up, `Ready` again with the conditions scenario steps set reported healthy,
//! except those a step marked persistent (a fault a reboot does not fix); its pods stay bound. Nodes
//! created through the API for kwok "instances" (`kerf controller --cloud kwok`) are made Ready
//! as soon as they appear, as kwok does, and their startup taints lifted as for any other node.
//! Whatever is bound to a Node starts (phase Running, Ready) as soon as that node is Ready,
//! however and whenever it was bound: by kube-scheduler before the node was Ready, or by a client
//! that set `spec.nodeName` itself. Nodes report their addresses and pods get theirs as they
//! start ([`crate::addresses`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, NodeAddress, NodeCondition, NodeSpec, NodeStatus, Taint as CoreTaint};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as CoreQuantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kerf_api::labels;
use kerf_api::{ResourceList, Taint, TaintEffect};
use kerf_cloud::Timestamp;

use crate::addresses::Addresses;
use crate::pod_writes::{set_running, write_pod};
use crate::world::World;
use kerf_apiserver::SimCluster;

/// How long after Ready the agents owning startup taints take to remove them.
pub const STARTUP_TAINT_DELAY: Duration = Duration::from_secs(5);
/// How long pods stay on a NotReady node before taint-based eviction removes them (the
/// default `tolerationSeconds` of the not-ready / unreachable tolerations).
pub const NOT_READY_EVICTION_DELAY: Duration = Duration::from_secs(300);

/// One instance of the simulated cloud, as the kubelet needs it.
#[derive(Debug, Clone, PartialEq)]
pub struct Instance {
    pub provider_id: String,
    pub node_name: String,
    pub instance_type: String,
    pub zone: String,
    pub capacity_type: String,
    pub price: f64,
    /// What the cloud lists its offering at (`price` is after NodeOverlays).
    pub list_price: f64,
    /// The NodeOverlays that apply to it, in precedence order.
    pub overlays: Vec<String>,
    /// Whether `price` comes from an estimated catalog price (data/README.md).
    pub price_estimated: bool,
    /// Labels the cloud says its Node carries (type, zone, region, capacity type, the claim's).
    pub labels: Arc<BTreeMap<String, String>>,
    pub launched_at: Timestamp,
    pub ready_at: Timestamp,
    pub terminated: bool,
    /// When it was terminated (deleted or reclaimed).
    pub terminated_at: Option<Timestamp>,
    /// When a pending reclaim (after a spot interruption warning) terminates it.
    pub terminates_at: Option<Timestamp>,
    /// When it was last rebooted, and when it is up again from that reboot.
    pub rebooted: Option<(Timestamp, Timestamp)>,
    /// The capacity reservation it runs in, if any.
    pub capacity_reservation: Option<String>,
}

#[derive(Debug, Default)]
pub struct Kubelet {
    /// provider ID -> node name, for instances whose Node registered.
    registered: BTreeMap<String, String>,
    /// Nodes that went NotReady because their instance is gone.
    not_ready: BTreeSet<String>,
    /// (when, node name, startup taint keys to lift).
    startup_lifts: Vec<(Timestamp, String, Vec<Taint>)>,
    /// (when, node name): pods on a NotReady node are evicted.
    evictions: Vec<(Timestamp, String)>,
    /// kwok nodes whose startup taints are scheduled to be lifted.
    kwok_lifts: BTreeSet<String>,
    /// provider ID → the reboot played last (when it was issued), so each one is played once.
    reboots_played: BTreeMap<String, Timestamp>,
    /// (when the instance is up again, node name): a rebooted node's kubelet reports again.
    reboot_returns: Vec<(Timestamp, String)>,
    /// Node → the conditions scenario steps set on it, each with whether it is persistent
    /// (survives a reboot).
    faults: BTreeMap<String, BTreeMap<String, bool>>,
    region: String,
    /// The addresses handed out to nodes not named after theirs (pods' follow from their uid).
    addresses: Addresses,
}

pub fn quantities(list: &ResourceList) -> BTreeMap<String, CoreQuantity> {
    list.iter().map(|(k, v)| (k.clone(), CoreQuantity(v.canonical()))).collect()
}

fn ready_condition(ready: bool, now: Timestamp) -> NodeCondition {
    NodeCondition {
        type_: "Ready".to_string(),
        status: if ready { "True" } else { "False" }.to_string(),
        reason: Some(if ready { "KubeletReady" } else { "NodeStatusNeverUpdated" }.to_string()),
        message: Some(if ready { "kubelet is posting ready status" } else { "the instance is gone" }.to_string()),
        last_transition_time: Some(Time(now)),
        last_heartbeat_time: Some(Time(now)),
    }
}

/// A Node present at t=0 with `addresses` (see [`Kubelet::node_addresses`]; its NodeClaim, if
/// any, is the driver's to create).
pub fn scenario_node(n: &crate::scenario::ScenarioNode, now: Timestamp, addresses: Vec<NodeAddress>) -> Node {
    let mut lbls = n.labels.clone();
    lbls.insert(labels::HOSTNAME.to_string(), n.name.clone());
    Node {
        metadata: ObjectMeta {
            name: Some(n.name.clone()),
            labels: Some(lbls),
            annotations: (!n.annotations.is_empty()).then(|| n.annotations.clone()),
            ..ObjectMeta::default()
        },
        spec: Some(NodeSpec {
            taints: if n.taints.is_empty() { None } else { Some(n.taints.iter().map(Taint::to_core).collect()) },
            provider_id: n.provider_id.clone(),
            ..NodeSpec::default()
        }),
        status: Some(NodeStatus {
            capacity: Some(quantities(&n.capacity)),
            allocatable: Some(quantities(n.allocatable())),
            conditions: Some(vec![ready_condition(true, now)]),
            addresses: Some(addresses),
            ..NodeStatus::default()
        }),
    }
}

/// The healthy status of a node condition: `False` for the kubelet's pressure conditions and
/// `NetworkUnavailable`, `True` for the others (`Ready`, the node agents' `...Ready`).
fn healthy_status(condition: &str) -> &'static str {
    if condition.ends_with("Pressure") || condition == "NetworkUnavailable" { "False" } else { "True" }
}

/// Sets a condition's status, reason and message as its reporter does: `lastTransitionTime`
/// moves only when the status changes.
fn report(c: &mut NodeCondition, status: &str, reason: &str, message: &str, now: Timestamp) {
    if c.status != status {
        c.last_transition_time = Some(Time(now));
    }
    c.status = status.to_string();
    c.reason = Some(reason.to_string());
    c.message = Some(message.to_string());
    c.last_heartbeat_time = Some(Time(now));
}

impl Kubelet {
    pub fn new(region: &str) -> Self {
        Kubelet { region: region.to_string(), ..Kubelet::default() }
    }

    /// The addresses the Node named `name` reports (see [`crate::addresses`]).
    pub fn node_addresses(&mut self, name: &str) -> Vec<NodeAddress> {
        self.addresses.node(name)
    }

    /// A scenario step set `condition` on `node`; `persistent`: a reboot does not fix it.
    pub fn note_fault(&mut self, node: &str, condition: &str, persistent: bool) {
        self.faults.entry(node.to_string()).or_default().insert(condition.to_string(), persistent);
    }

    /// The kubelet of a rebooted instance stops posting: its Node's `Ready` turns `Unknown`.
    fn reboot_started(node: &Node, now: Timestamp) -> Node {
        let mut n = node.clone();
        let conditions = n.status.get_or_insert_with(NodeStatus::default).conditions.get_or_insert_with(Vec::new);
        let message = "Kubelet stopped posting node status: the instance is rebooting.";
        match conditions.iter_mut().find(|c| c.type_ == "Ready") {
            Some(c) => report(c, "Unknown", "NodeStatusUnknown", message, now),
            None => conditions.push(NodeCondition {
                type_: "Ready".to_string(),
                status: "Unknown".to_string(),
                reason: Some("NodeStatusUnknown".to_string()),
                message: Some(message.to_string()),
                last_transition_time: Some(Time(now)),
                last_heartbeat_time: Some(Time(now)),
            }),
        }
        n
    }

    /// A rebooted node is up again: `Ready`, and every condition a scenario step set reported
    /// healthy, except the persistent ones (left as they were). The faults it fixed are
    /// forgotten.
    fn reboot_finished(&mut self, node: &Node, now: Timestamp) -> Node {
        let name = node.metadata.name.clone().unwrap_or_default();
        let faults = self.faults.entry(name.clone()).or_default();
        let mut n = node.clone();
        let conditions = n.status.get_or_insert_with(NodeStatus::default).conditions.get_or_insert_with(Vec::new);
        for c in conditions.iter_mut() {
            let persistent = faults.get(&c.type_).copied().unwrap_or(false);
            if persistent || (c.type_ != "Ready" && !faults.contains_key(&c.type_)) {
                continue;
            }
            if c.type_ == "Ready" {
                report(c, "True", "KubeletReady", "kubelet is posting ready status", now);
            } else {
                report(c, healthy_status(&c.type_), "NodeRebooted", "the node rebooted", now);
            }
        }
        faults.retain(|_, persistent| *persistent);
        if faults.is_empty() {
            self.faults.remove(&name);
        }
        n
    }

    /// An instance whose Node exists already (a node present at t=0): nothing to register.
    pub fn adopt(&mut self, provider_id: &str, node_name: &str) {
        self.registered.insert(provider_id.to_string(), node_name.to_string());
    }

    /// Registers Nodes for instances that are up, lifts due startup taints, marks Nodes of
    /// terminated instances NotReady. Returns the next time it has something to do.
    pub fn run(
        &mut self,
        instances: &[Instance],
        world: &World,
        cluster: &SimCluster,
        now: Timestamp,
    ) -> Option<Timestamp> {
        let mut next: Option<Timestamp> = None;
        let mut wake = |t: Timestamp| next = Some(next.map_or(t, |n: Timestamp| n.min(t)));
        for inst in instances {
            if !inst.terminated
                && let Some(t) = inst.terminates_at
            {
                wake(t);
            }
            if inst.terminated {
                if let Some(node) = self.registered.get(&inst.provider_id) {
                    // A terminated instance does not come back from a reboot.
                    self.reboot_returns.retain(|(_, n)| n != node);
                }
                if let Some(node) = self.registered.get(&inst.provider_id).cloned()
                    && !self.not_ready.contains(&node)
                    && let Some(n) = world.nodes.get(&node)
                {
                    let mut n = (**n).clone();
                    let status = n.status.get_or_insert_with(NodeStatus::default);
                    status.conditions = Some(vec![ready_condition(false, now)]);
                    let taints = n.spec.get_or_insert_with(NodeSpec::default).taints.get_or_insert_with(Vec::new);
                    for (key, effect) in [
                        (labels::NODE_NOT_READY_TAINT_KEY, "NoSchedule"),
                        (labels::NODE_UNREACHABLE_TAINT_KEY, "NoExecute"),
                    ] {
                        if !taints.iter().any(|t| t.key == key && t.effect == effect) {
                            taints.push(CoreTaint {
                                key: key.to_string(),
                                effect: effect.to_string(),
                                time_added: Some(Time(now)),
                                value: None,
                            });
                        }
                    }
                    if cluster.replace_obj(n).is_ok() {
                        let at = Timestamp::from_millisecond(
                            now.as_millisecond() + NOT_READY_EVICTION_DELAY.as_millis() as i64,
                        )
                        .unwrap_or(now);
                        self.evictions.push((at, node.clone()));
                        self.not_ready.insert(node);
                    } else {
                        wake(now);
                    }
                }
                continue;
            }
            if let Some(node) = self.registered.get(&inst.provider_id).cloned() {
                if let Some((at, back)) = inst.rebooted
                    && self.reboots_played.get(&inst.provider_id) != Some(&at)
                {
                    match world.nodes.get(&node).map(|n| cluster.replace_obj(Self::reboot_started(n, now))) {
                        Some(Err(_)) => wake(now),
                        _ => {
                            self.reboots_played.insert(inst.provider_id.clone(), at);
                            self.reboot_returns.push((back, node));
                            wake(back);
                        }
                    }
                }
                continue;
            }
            if inst.ready_at > now {
                wake(inst.ready_at);
                continue;
            }
            let Some(claim) = world.claim_by_provider.get(&inst.provider_id).and_then(|c| world.claims.get(c)) else {
                // The claim's status has not been written yet; the write wakes us.
                continue;
            };
            let mut lbls = BTreeMap::clone(&inst.labels);
            lbls.extend(claim.metadata.labels.clone().unwrap_or_default());
            lbls.insert(labels::HOSTNAME.to_string(), inst.node_name.clone());
            lbls.entry(labels::INSTANCE_TYPE.to_string()).or_insert_with(|| inst.instance_type.clone());
            lbls.entry(labels::ZONE.to_string()).or_insert_with(|| inst.zone.clone());
            lbls.entry(labels::CAPACITY_TYPE.to_string()).or_insert_with(|| inst.capacity_type.clone());
            if !self.region.is_empty() {
                lbls.entry(labels::REGION.to_string()).or_insert_with(|| self.region.clone());
            }
            let mut taints: Vec<Taint> = claim.spec.taints.clone();
            taints.extend(claim.spec.startup_taints.iter().cloned());
            taints.push(Taint::new(labels::UNREGISTERED_TAINT_KEY, None, TaintEffect::NoExecute));
            let status = claim.status.clone().unwrap_or_default();
            let allocatable =
                if status.allocatable.is_empty() { status.capacity.clone() } else { status.allocatable.clone() };
            let node = Node {
                metadata: ObjectMeta {
                    name: Some(inst.node_name.clone()),
                    labels: Some(lbls),
                    ..ObjectMeta::default()
                },
                spec: Some(NodeSpec {
                    provider_id: Some(inst.provider_id.clone()),
                    taints: Some(taints.iter().map(Taint::to_core).collect()),
                    ..NodeSpec::default()
                }),
                status: Some(NodeStatus {
                    capacity: Some(quantities(&status.capacity)),
                    allocatable: Some(quantities(&allocatable)),
                    conditions: Some(vec![ready_condition(true, now)]),
                    addresses: Some(self.addresses.node(&inst.node_name)),
                    ..NodeStatus::default()
                }),
            };
            match cluster.create_obj(node) {
                Ok(_) => {
                    self.registered.insert(inst.provider_id.clone(), inst.node_name.clone());
                    if !claim.spec.startup_taints.is_empty() {
                        let at =
                            Timestamp::from_millisecond(now.as_millisecond() + STARTUP_TAINT_DELAY.as_millis() as i64)
                                .unwrap_or(now);
                        self.startup_lifts.push((at, inst.node_name.clone(), claim.spec.startup_taints.clone()));
                    }
                }
                Err(e) => tracing::warn!(node = %inst.node_name, error = %e, "cannot register node"),
            }
        }
        let returns = std::mem::take(&mut self.reboot_returns);
        for (at, node) in returns {
            if at > now {
                wake(at);
                self.reboot_returns.push((at, node));
                continue;
            }
            let Some(n) = world.nodes.get(&node) else { continue };
            let up = self.reboot_finished(n, now);
            if cluster.replace_obj(up).is_err() {
                wake(now);
                self.reboot_returns.push((now, node));
            }
        }
        let evictions = std::mem::take(&mut self.evictions);
        for (at, node) in evictions {
            if at > now {
                wake(at);
                self.evictions.push((at, node));
                continue;
            }
            evict_from_unreachable_node(world, cluster, &node);
        }
        let lifts = std::mem::take(&mut self.startup_lifts);
        for (at, node, startup) in lifts {
            if at > now {
                wake(at);
                self.startup_lifts.push((at, node, startup));
                continue;
            }
            let Some(n) = world.nodes.get(&node) else { continue };
            let mut n = (**n).clone();
            if let Some(taints) = n.spec.as_mut().and_then(|s| s.taints.as_mut()) {
                taints.retain(|t| !startup.iter().any(|s| s.key == t.key && s.effect.as_str() == t.effect));
            }
            if cluster.update_obj(n).is_err() {
                // Someone else wrote the node first: try again with the fresh copy.
                wake(now);
                self.startup_lifts.push((now, node, startup));
            }
        }
        next
    }
}

impl Kubelet {
    /// Marks Ready the kwok nodes among `changed` that are not Ready yet (and not going away),
    /// and schedules the lifting of their claim's startup taints (once the claim names the
    /// node's provider ID). Returns when it must run again.
    pub fn ready_kwok_nodes<'a>(
        &mut self,
        changed: impl IntoIterator<Item = &'a String>,
        world: &World,
        cluster: &SimCluster,
        now: Timestamp,
    ) -> Option<Timestamp> {
        self.kwok_lifts.retain(|n| world.nodes.contains_key(n));
        let mut next = None;
        for name in changed {
            let Some(n) = world.nodes.get(name) else { continue };
            let Some(pid) = n
                .spec
                .as_ref()
                .and_then(|s| s.provider_id.as_deref())
                .filter(|p| p.starts_with(kerf_cloud::KWOK_PROVIDER_ID_PREFIX))
            else {
                continue;
            };
            if n.metadata.deletion_timestamp.is_some() {
                continue;
            }
            if let Some(claim) = world.claim_by_provider.get(pid).and_then(|c| world.claims.get(c))
                && !claim.spec.startup_taints.is_empty()
                && self.kwok_lifts.insert(name.clone())
            {
                let at = Timestamp::from_millisecond(now.as_millisecond() + STARTUP_TAINT_DELAY.as_millis() as i64)
                    .unwrap_or(now);
                self.startup_lifts.push((at, name.clone(), claim.spec.startup_taints.clone()));
                next = Some(next.map_or(at, |t: Timestamp| t.min(at)));
            }
            let addressed = n.status.as_ref().and_then(|s| s.addresses.as_ref()).is_some_and(|a| !a.is_empty());
            let ready = kerf_scheduling::node::node_ready(n);
            if ready && addressed {
                continue;
            }
            let mut n = (**n).clone();
            let status = n.status.get_or_insert_with(NodeStatus::default);
            if !ready {
                status.conditions = Some(vec![ready_condition(true, now)]);
            }
            if !addressed {
                status.addresses = Some(self.addresses.node(name));
            }
            // A lost race is retried on the node's next change, which the winner's write is.
            if let Err(e) = cluster.replace_obj(n) {
                tracing::debug!(node = %name, error = %e, "cannot mark kwok node ready yet");
            }
        }
        next
    }
}

impl Kubelet {
    /// Starts those of `pods` that are bound to a Ready node and have not started yet; the
    /// others wait for their node's readiness to change. A write that loses a race is retried
    /// on the pod's next change, which the winner's write is.
    pub fn start_pods<'a>(
        &self,
        pods: impl IntoIterator<Item = &'a String>,
        world: &World,
        cluster: &SimCluster,
        now: Timestamp,
    ) {
        for key in pods {
            let Some(entry) = world.pods.get(key) else { continue };
            let Some(node) = entry.node() else { continue };
            if crate::world::started(&entry.pod) || !world.is_node_ready(node) {
                continue;
            }
            let host_ip = world.node_ip(node);
            if let Some(Err(e)) = write_pod(cluster, &entry.pod, |p| set_running(p, now, host_ip)) {
                tracing::debug!(pod = %key, error = %e, "cannot start pod yet");
            }
        }
    }
}

/// Taint-based eviction: pods that do not tolerate `node.kubernetes.io/unreachable:NoExecute`
/// forever leave a node that has been NotReady for the eviction delay.
fn evict_from_unreachable_node(world: &World, cluster: &SimCluster, node: &str) {
    let unreachable = Taint::new(labels::NODE_UNREACHABLE_TAINT_KEY, None, TaintEffect::NoExecute);
    for key in world.pods_by_node.get(node).into_iter().flatten() {
        let Some(entry) = world.pods.get(key) else { continue };
        let stays = kerf_scheduling::pod::tolerations(&entry.pod)
            .iter()
            .any(|t| t.toleration_seconds.is_none() && kerf_scheduling::pod::tolerates(t, &unreachable));
        if !stays && let Some((ns, name)) = key.split_once('/') {
            let _ = cluster.delete_obj::<k8s_openapi::api::core::v1::Pod>(Some(ns), name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kerf_cloud::{Clock, ManualClock};

    fn node(conditions: &[(&str, &str)]) -> Node {
        Node {
            metadata: ObjectMeta { name: Some("n1".to_string()), ..ObjectMeta::default() },
            status: Some(NodeStatus {
                conditions: Some(
                    conditions
                        .iter()
                        .map(|(t, s)| NodeCondition {
                            type_: t.to_string(),
                            status: s.to_string(),
                            ..Default::default()
                        })
                        .collect(),
                ),
                ..NodeStatus::default()
            }),
            ..Node::default()
        }
    }

    fn statuses(n: &Node) -> Vec<(String, String)> {
        n.status
            .iter()
            .flat_map(|s| s.conditions.iter().flatten())
            .map(|c| (c.type_.clone(), c.status.clone()))
            .collect()
    }

    #[test]
    fn a_reboot_reports_the_faults_steps_set_healthy_except_the_persistent_ones() {
        let now = ManualClock::new().now();
        let mut k = Kubelet::new("us-west-2");
        k.note_fault("n1", "Ready", false);
        k.note_fault("n1", "AcceleratedHardwareReady", false);
        k.note_fault("n1", "MemoryPressure", false);
        k.note_fault("n1", "KernelReady", true);
        let before = node(&[
            ("Ready", "True"),
            ("AcceleratedHardwareReady", "False"),
            ("MemoryPressure", "True"),
            ("KernelReady", "False"),
            ("DiskPressure", "True"),
        ]);
        let down = Kubelet::reboot_started(&before, now);
        assert_eq!(statuses(&down)[0], ("Ready".to_string(), "Unknown".to_string()));
        let up = k.reboot_finished(&down, now);
        let s = |t: &str, v: &str| (t.to_string(), v.to_string());
        assert_eq!(
            statuses(&up),
            [
                s("Ready", "True"),
                s("AcceleratedHardwareReady", "True"),
                s("MemoryPressure", "False"),
                s("KernelReady", "False"),
                s("DiskPressure", "True"),
            ],
            "fixed: what steps set and did not mark persistent; untouched: the rest"
        );
        // The persistent fault survives the next reboot too; the fixed ones are forgotten.
        assert_eq!(k.faults.get("n1").map(|f| f.keys().cloned().collect::<Vec<_>>()), Some(vec!["KernelReady".into()]));
        // A persistent stopped kubelet keeps the node not Ready through a reboot.
        let mut k = Kubelet::new("us-west-2");
        k.note_fault("n1", "Ready", true);
        let up = k.reboot_finished(&Kubelet::reboot_started(&node(&[("Ready", "Unknown")]), now), now);
        assert_eq!(statuses(&up), [s("Ready", "Unknown")]);
    }
}
