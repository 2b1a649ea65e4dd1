//! Existing nodes and in-flight claims: their state in the context (requests and host ports
//! taken, journaled), built once from the input. The fit check asked about them is
//! `node_fit`.

use std::collections::HashMap;

use kerf_api::Taint;
use kerf_api::labels::HOSTNAME;

use super::facts::{Pods, existing_pod_ranges};
use super::ids::{Idx, IxVec, NodeIx, PodIx, PoolIx};
use super::interning::Interner;
use super::journal::Undo;
use super::pools::Pools;
use super::resources::Resources;
use crate::model::SchedulingInput;
use crate::node_labels::NodeLabels;
use crate::pod::HostPort;

pub(super) struct Node {
    pub(super) name: String,
    /// The input's labels (shared with it), the hostname label added where it lacks one.
    pub(super) labels: NodeLabels,
    pub(super) taints: Vec<Taint>,
    pub(super) alloc: Vec<i64>,
    pub(super) used: Vec<i64>,
    pub(super) ports: Vec<HostPort>,
    pub(super) schedulable: bool,
    /// The node's pods.
    pub(super) pods: Vec<PodIx>,
    /// The NodePool (index) whose limits the node counts against, and what it holds of them.
    pub(super) pool: Option<PoolIx>,
    pub(super) pool_usage: Vec<i64>,
    /// The CapacityQuotas (indexes) that select the node, and what it holds of them (its
    /// NodeClaim's capacity, else its allocatable).
    pub(super) quotas: Vec<usize>,
    pub(super) quota_usage: Vec<i64>,
}

impl Node {
    /// The node's domain for `key` (its label values are interned up front).
    pub(super) fn domain(&self, values: &Interner, key: &str) -> Option<u32> {
        self.labels.get(key).and_then(|v| values.ids.get(v.as_str()).copied())
    }
}

/// The existing nodes and in-flight claims of `input` (initialized nodes first), each with its
/// pods (of `of`, laid out as [`existing_pod_ranges`] says) and the NodePool of `pools` it counts
/// against, and the index of each by name; their label values are interned in `values`.
pub(super) fn build(
    input: &SchedulingInput,
    res: &Resources,
    pools: &Pools,
    of: &Pods,
    values: &mut Interner,
) -> (IxVec<NodeIx, Node>, foldhash::HashMap<String, NodeIx>) {
    let mut nodes: IxVec<NodeIx, Node> = IxVec::default();
    let mut node_index = foldhash::HashMap::default();
    // Each existing node's pods, by context index.
    let ranges = existing_pod_ranges(input);
    // Initialized nodes first, then in-flight claims (stable).
    let mut order: Vec<usize> = (0..input.existing_nodes.len()).collect();
    order.sort_by_key(|i| input.existing_nodes[*i].in_flight);
    let pool_by_name: HashMap<&str, PoolIx> = pools.all.iter_enumerated().map(|(i, p)| (p.name.as_str(), i)).collect();
    for i in order {
        let n = &input.existing_nodes[i];
        let mut used = vec![0i64; res.names.len()];
        let mut ports = Vec::new();
        let pods: Vec<PodIx> = ranges[i].clone().map(PodIx::new).collect();
        for &pi in &pods {
            for (u, v) in used.iter_mut().zip(&of.requests[pi]) {
                *u += v;
            }
            ports.extend(of.facts[pi].ports.iter().cloned());
        }
        let mut labels = n.labels.clone();
        if !labels.contains_key(HOSTNAME) {
            labels.to_mut().insert(HOSTNAME.to_string(), n.name.clone());
        }
        for v in labels.values() {
            values.id(v);
        }
        let quotas: Vec<usize> = (pools.quotas.inputs.iter().enumerate())
            .filter(|(_, q)| q.selects(|k| labels.get(k).map(String::as_str)))
            .map(|(i, _)| i)
            .collect();
        let pool_usage = res.dense(&n.pool_usage);
        let quota_usage = if quotas.is_empty() {
            Vec::new()
        } else if n.pool_usage.is_empty() {
            res.dense(&n.allocatable)
        } else {
            pool_usage.clone()
        };
        node_index.insert(n.name.clone(), NodeIx::new(nodes.len()));
        nodes.push(Node {
            name: n.name.clone(),
            labels,
            taints: n.taints.clone(),
            alloc: res.dense_allocatable(&n.allocatable),
            used,
            ports,
            schedulable: n.schedulable,
            pods,
            pool: n.node_pool.as_deref().and_then(|p| pool_by_name.get(p).copied()),
            pool_usage,
            quotas,
            quota_usage,
        });
    }
    (nodes, node_index)
}

impl Node {
    /// Pod `pi` (of `requests`, asking for host `ports`) goes on this node, `n`: its requests
    /// and ports are taken, recorded in `journal`.
    pub(super) fn take(&mut self, n: NodeIx, pi: PodIx, requests: &[i64], ports: &[HostPort], journal: &mut Vec<Undo>) {
        for (u, v) in self.used.iter_mut().zip(requests) {
            *u += v;
        }
        journal.push(Undo::NodeUsed { node: n, pod: pi });
        if !ports.is_empty() {
            journal.push(Undo::NodePorts { node: n, len: self.ports.len() });
            self.ports.extend(ports.iter().cloned());
        }
    }
}
