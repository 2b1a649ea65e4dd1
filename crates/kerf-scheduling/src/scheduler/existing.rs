//! Existing nodes and in-flight claims: their state in the context, and the one node-fit check
//! ([`crate::fit::check`]) asked about them, with a per-level cache of the checks that do not
//! change during a query (taints, node affinity, volume topology).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Toleration;
use kerf_api::Taint;
use kerf_api::labels::HOSTNAME;

use super::SchedulingContext;
use super::ids::{Attempt, GroupIx, Idx, IxVec, NodeIx, PodIx, PoolIx};
use super::journal::Undo;
use super::preferences::Level;
use crate::pod::{self, HostPort};

pub(super) struct Node {
    pub(super) name: String,
    pub(super) labels: BTreeMap<String, String>,
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
}

/// The fit check's questions about an attempt's pod on existing node `n`, answered from the
/// context's state. `static_ok`: the level's cached taint, node affinity and volume verdict for
/// the node (only a failing node re-asks which one failed).
pub(super) struct NodeFit<'s> {
    pub(super) s: &'s SchedulingContext,
    pub(super) at: Attempt,
    pub(super) n: NodeIx,
    pub(super) static_ok: bool,
}

impl NodeFit<'_> {
    pub(super) fn level(&self) -> &Level {
        &self.s.groups[self.at.group].levels[self.at.level]
    }
    pub(super) fn node(&self) -> &Node {
        &self.s.nodes[self.n]
    }
}

impl crate::fit::FitQuery for NodeFit<'_> {
    fn schedulable(&mut self) -> bool {
        self.node().schedulable
    }
    fn node_name_matches(&mut self) -> bool {
        // The Scheduler places pods kube-scheduler has not bound: `spec.nodeName` is unset.
        true
    }
    fn untolerated_taint(&mut self) -> Option<usize> {
        if self.static_ok {
            return None;
        }
        let grp = &self.s.groups[self.at.group];
        let taints = &self.node().taints;
        let t = pod::untolerated_taint_with(&grp.tolerations, taints, !self.level().tolerate_prefer)?;
        taints.iter().position(|x| std::ptr::eq(x, t))
    }
    fn node_affinity_matches(&mut self) -> bool {
        let level = self.level();
        self.static_ok
            || crate::fit::node_affinity_matches(
                std::slice::from_ref(&self.s.reqs[level.req as usize]),
                std::slice::from_ref(&level.name_field),
                &self.node().name,
                &self.node().labels,
            )
    }
    fn host_ports_free(&mut self) -> bool {
        crate::fit::host_ports_free(&self.s.groups[self.at.group].ports, &self.node().ports)
    }
    fn short_resource(&mut self) -> Option<usize> {
        let node = self.node();
        crate::fit::short_resource(
            self.s.pod_requests[self.at.pod].iter().zip(&node.used).zip(&node.alloc).map(|((r, u), a)| (*r, *u, *a)),
        )
    }
    fn volumes_match(&mut self) -> bool {
        self.static_ok || crate::fit::volumes_match(&self.s.groups[self.at.group].volume_alts, &self.node().labels)
    }
    fn spread(&mut self) -> Result<(), crate::fit::Why> {
        for (i, sp) in self.level().spreads.iter().enumerate() {
            let d = self.s.node_domain(self.n, &sp.key).ok_or(crate::fit::Why::SpreadMissingLabel)?;
            if !self.s.spread_allows(sp, d) {
                return Err(crate::fit::Why::Spread(i));
            }
        }
        Ok(())
    }
    fn existing_anti_affinity_ok(&mut self) -> bool {
        self.s.groups[self.at.group].rejected_by.iter().all(|&i| {
            let inv = &self.s.inverses[i];
            self.s.node_domain(self.n, &inv.key).is_none_or(|d| !inv.is_blocked(d))
        })
    }
    fn anti_affinity_ok(&mut self) -> bool {
        self.level().anti.iter().all(|&c| {
            let counter = &self.s.counters[c];
            self.s.node_domain(self.n, &counter.key).is_none_or(|d| counter.get(d) == 0)
        })
    }
    fn affinity_ok(&mut self) -> bool {
        self.level().affinity.iter().all(|set| {
            let (mut keys_present, mut pods_in_domains, mut none_anywhere) = (true, true, true);
            for c in set.counters.iter().map(|c| &self.s.counters[*c]) {
                match self.s.node_domain(self.n, &c.key) {
                    None => (keys_present, pods_in_domains) = (false, false),
                    Some(d) => pods_in_domains &= c.get(d) > 0,
                }
                none_anywhere &= c.total == 0;
            }
            crate::fit::pod_affinity_ok(keys_present, pods_in_domains, none_anywhere, set.matches_own)
        })
    }
    fn taint(&self, i: usize) -> Option<&Taint> {
        self.node().taints.get(i)
    }
    fn resource_name(&self, i: usize) -> &str {
        self.s.res.names.get(i).map(String::as_str).unwrap_or("")
    }
    fn spread_detail(&self, i: usize) -> Option<String> {
        self.level().spreads.get(i).map(|sp| self.s.spread_counts(sp))
    }
}

impl SchedulingContext {
    pub(super) fn build_nodes(&mut self) {
        // Each existing node's pods, by context index.
        let ranges = super::existing_pod_ranges(&self.input);
        // Initialized nodes first, then in-flight claims (stable).
        let mut order: Vec<usize> = (0..self.input.existing_nodes.len()).collect();
        order.sort_by_key(|i| self.input.existing_nodes[*i].in_flight);
        let input = Arc::clone(&self.input);
        let pool_by_name: HashMap<&str, PoolIx> =
            self.pools.iter_enumerated().map(|(i, p)| (p.name.as_str(), i)).collect();
        for i in order {
            let n = &input.existing_nodes[i];
            let mut used = vec![0i64; self.res.names.len()];
            let mut ports = Vec::new();
            let pods: Vec<PodIx> = ranges[i].clone().map(PodIx::new).collect();
            for &pi in &pods {
                for (u, v) in used.iter_mut().zip(&self.pod_requests[pi]) {
                    *u += v;
                }
                ports.extend(self.facts[pi].ports.iter().cloned());
            }
            let mut labels: BTreeMap<String, String> = n.labels.clone();
            labels.entry(HOSTNAME.to_string()).or_insert_with(|| n.name.clone());
            for v in labels.values() {
                self.values.id(v);
            }
            self.node_index.insert(n.name.clone(), NodeIx::new(self.nodes.len()));
            self.nodes.push(Node {
                name: n.name.clone(),
                labels,
                taints: n.taints.clone(),
                alloc: self.res.dense(&n.allocatable),
                used,
                ports,
                schedulable: n.schedulable,
                pods,
                pool: n.node_pool.as_deref().and_then(|p| pool_by_name.get(p).copied()),
                pool_usage: self.res.dense(&n.pool_usage),
            });
        }
    }

    pub(super) fn tolerated(tols: &[Toleration], taints: &[Taint], tolerate_prefer: bool) -> bool {
        pod::untolerated_taint_with(tols, taints, !tolerate_prefer).is_none()
    }

    /// Whether the attempt's pod fits existing node `n`.
    pub(super) fn node_fits(&mut self, at: Attempt, n: NodeIx) -> bool {
        // Cheap rejections first (the answer is the same; only the reason's order differs).
        let node = &self.nodes[n];
        if !node.schedulable
            || crate::fit::short_resource(
                self.pod_requests[at.pod].iter().zip(&node.used).zip(&node.alloc).map(|((r, u), a)| (*r, *u, *a)),
            )
            .is_some()
        {
            return false;
        }
        self.node_fit(at, n).is_ok()
    }

    /// The one node-fit check ([`crate::fit::check`]) for the attempt's pod on existing node `n`.
    pub(super) fn node_fit(&mut self, at: Attempt, n: NodeIx) -> Result<(), crate::fit::Why> {
        // Taints, node affinity and volume zones do not change during a query: once per level.
        let static_ok = self.node_static_ok(at, n);
        crate::fit::check(&mut NodeFit { s: self, at, n, static_ok })
    }

    /// Whether the taints, node affinity and volume zones of the attempt's group at its level
    /// allow existing node `n` (computed for every node once per level).
    pub(super) fn node_static_ok(&mut self, at: Attempt, n: NodeIx) -> bool {
        let (g, l) = (at.group, at.level);
        if self.groups[g].node_ok.len() <= l.ix() {
            self.groups[g].node_ok.resize_with(l.ix() + 1, IxVec::default);
        }
        if self.groups[g].node_ok[l].is_empty() {
            let grp = &self.groups[g];
            let level = &grp.levels[l];
            let r = &self.reqs[level.req as usize];
            let ok: IxVec<NodeIx, bool> = self
                .nodes
                .iter()
                .map(|node| {
                    Self::tolerated(&grp.tolerations, &node.taints, level.tolerate_prefer)
                        && crate::fit::node_affinity_matches(
                            std::slice::from_ref(r),
                            std::slice::from_ref(&level.name_field),
                            &node.name,
                            &node.labels,
                        )
                        && crate::fit::volumes_match(&grp.volume_alts, &node.labels)
                })
                .collect();
            self.groups[g].node_ok[l] = ok;
        }
        self.groups[g].node_ok[l][n]
    }

    pub(super) fn commit_node(&mut self, pi: PodIx, g: GroupIx, n: NodeIx) {
        for (u, v) in self.nodes[n].used.iter_mut().zip(&self.pod_requests[pi]) {
            *u += v;
        }
        self.journal.push(Undo::NodeUsed { node: n, pod: pi });
        if !self.groups[g].ports.is_empty() {
            self.journal.push(Undo::NodePorts { node: n, len: self.nodes[n].ports.len() });
            let ports = self.groups[g].ports.clone();
            self.nodes[n].ports.extend(ports);
        }
        self.count_pod(n, pi, 1);
    }
}
