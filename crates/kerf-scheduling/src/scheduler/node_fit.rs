//! The one node-fit check ([`crate::fit::check`]) asked about existing nodes and in-flight
//! claims. [`NodeChecks`] is an attempt's pod against the nodes: whether it fits one, and why
//! not in kube-scheduler's words; [`NodeFit`] answers the check's questions about one node from
//! the parts, and [`static_ok`] keeps per level the checks that do not change during a query
//! (taints, node affinity, volume topology).

use k8s_openapi::api::core::v1::Toleration;
use kerf_api::Taint;

use super::existing::Node;
use super::ids::{Idx, IxVec, LevelIx, NodeIx};
use super::interning::Interned;
use super::preferences::{Group, Level};
use super::resources::Resources;
use super::topology::{Gone, Topology};
use crate::pod;
use crate::requirements::Requirements;

/// An attempt's pod (its group at a level, its requests) against the existing nodes: the parts
/// the node-fit check reads, and the group that keeps the level's verdicts per node.
pub(super) struct NodeChecks<'s> {
    pub(super) group: &'s mut Group,
    pub(super) level: LevelIx,
    /// The pod's dense requests.
    pub(super) requests: &'s [i64],
    pub(super) interned: &'s Interned,
    pub(super) topology: &'s Topology,
    /// Every node (`all`), and those the running what-if took away.
    pub(super) gone: Gone<'s>,
    pub(super) res: &'s Resources,
}

impl NodeChecks<'_> {
    /// Whether the pod fits existing node `n`: cheap rejections first (the answer is the same;
    /// only the reason's order differs).
    pub(super) fn fits(&mut self, n: NodeIx) -> bool {
        let node = &self.gone.all[n];
        if !node.schedulable
            || crate::fit::short_resource(
                self.requests.iter().zip(&node.used).zip(&node.alloc).map(|((r, u), a)| (*r, *u, *a)),
            )
            .is_some()
        {
            return false;
        }
        self.fit(n).is_ok()
    }

    /// The one node-fit check ([`crate::fit::check`]) for the pod on existing node `n`.
    pub(super) fn fit(&mut self, n: NodeIx) -> Result<(), crate::fit::Why> {
        // Taints, node affinity and volume zones do not change during a query: once per level.
        let static_ok = self.static_ok(n);
        crate::fit::check(&mut self.node(n, static_ok))
    }

    /// What the check says of existing node `n`, in kube-scheduler's words.
    pub(super) fn reason(&mut self, n: NodeIx) -> String {
        match self.fit(n) {
            Ok(()) => "node(s) would fit".into(),
            Err(why) => {
                let static_ok = self.static_ok(n);
                crate::fit::describe(&self.node(n, static_ok), why).reason
            }
        }
    }

    /// Whether the taints, node affinity and volume zones of the group at its level allow
    /// existing node `n` (see [`static_ok`]).
    fn static_ok(&mut self, n: NodeIx) -> bool {
        static_ok(self.group, self.level, self.gone.all, &self.interned.reqs, n)
    }

    /// The fit check's questions about the pod on existing node `n`.
    fn node(&self, n: NodeIx, static_ok: bool) -> NodeFit<'_> {
        let group = &*self.group;
        NodeFit {
            group,
            level: &group.state.levels[self.level],
            node: &self.gone.all[n],
            requests: self.requests,
            interned: self.interned,
            topology: self.topology,
            gone: self.gone,
            res: self.res,
            static_ok,
        }
    }
}

/// The fit check's questions about an attempt's pod on existing node `n`, answered from the
/// context's state. `static_ok`: the level's cached taint, node affinity and volume verdict for
/// the node (only a failing node re-asks which one failed).
pub(super) struct NodeFit<'s> {
    pub(super) group: &'s Group,
    pub(super) level: &'s Level,
    pub(super) node: &'s Node,
    /// The pod's dense requests.
    pub(super) requests: &'s [i64],
    /// The interned requirement sets and label values.
    pub(super) interned: &'s Interned,
    pub(super) topology: &'s Topology,
    /// The nodes the running what-if took away.
    pub(super) gone: Gone<'s>,
    pub(super) res: &'s Resources,
    pub(super) static_ok: bool,
}

impl NodeFit<'_> {
    fn level(&self) -> &Level {
        self.level
    }
    fn node(&self) -> &Node {
        self.node
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
        let grp = self.group;
        let taints = &self.node().taints;
        let t = pod::untolerated_taint_with(&grp.tolerations, taints, !self.level().tolerate_prefer)?;
        taints.iter().position(|x| std::ptr::eq(x, t))
    }
    fn node_affinity_matches(&mut self) -> bool {
        let level = self.level();
        self.static_ok
            || crate::fit::node_affinity_matches(
                std::slice::from_ref(&self.interned.reqs[level.req as usize]),
                std::slice::from_ref(&level.name_field),
                &self.node().name,
                &self.node().labels,
            )
    }
    fn host_ports_free(&mut self) -> bool {
        crate::fit::host_ports_free(&self.group.ports, &self.node().ports)
    }
    fn short_resource(&mut self) -> Option<usize> {
        let node = self.node();
        crate::fit::short_resource(
            self.requests.iter().zip(&node.used).zip(&node.alloc).map(|((r, u), a)| (*r, *u, *a)),
        )
    }
    fn volumes_match(&mut self) -> bool {
        self.static_ok || crate::fit::volumes_match(&self.group.volumes.volume_alts, &self.node().labels)
    }
    fn spread(&mut self) -> Result<(), crate::fit::Why> {
        for (i, sp) in self.level().spreads.iter().enumerate() {
            let d = self.node.domain(&self.interned.values, &sp.key).ok_or(crate::fit::Why::SpreadMissingLabel)?;
            if !self.topology.spread_allows(sp, d, self.gone, &self.interned.values) {
                return Err(crate::fit::Why::Spread(i));
            }
        }
        Ok(())
    }
    fn existing_anti_affinity_ok(&mut self) -> bool {
        self.group.state.rejected_by.iter().all(|&i| {
            let inv = &self.topology.inverses[i];
            self.node.domain(&self.interned.values, &inv.key).is_none_or(|d| !inv.is_blocked(d))
        })
    }
    fn anti_affinity_ok(&mut self) -> bool {
        self.level().anti.iter().all(|&c| {
            let counter = &self.topology.counters[c];
            self.node.domain(&self.interned.values, &counter.key).is_none_or(|d| counter.get(d) == 0)
        })
    }
    fn affinity_ok(&mut self) -> bool {
        self.level().affinity.iter().all(|set| {
            let (mut keys_present, mut pods_in_domains, mut none_anywhere) = (true, true, true);
            for c in set.counters.iter().map(|c| &self.topology.counters[*c]) {
                match self.node.domain(&self.interned.values, &c.key) {
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
        self.res.names.get(i).map(String::as_str).unwrap_or("")
    }
    fn spread_detail(&self, i: usize) -> Option<String> {
        self.level().spreads.get(i).map(|sp| self.topology.spread_counts(sp, &self.interned.values))
    }
}

/// Whether the taints, node affinity and volume zones of group `grp` at level `l` allow
/// existing node `n` of `nodes` (computed for every node once per level).
fn static_ok(grp: &mut Group, l: LevelIx, nodes: &IxVec<NodeIx, Node>, reqs: &[Requirements], n: NodeIx) -> bool {
    if grp.state.node_ok.len() <= l.ix() {
        grp.state.node_ok.resize_with(l.ix() + 1, IxVec::default);
    }
    if grp.state.node_ok[l].is_empty() {
        let level = &grp.state.levels[l];
        let r = &reqs[level.req as usize];
        let ok: IxVec<NodeIx, bool> = nodes
            .iter()
            .map(|node| {
                tolerated(&grp.tolerations, &node.taints, level.tolerate_prefer)
                    && crate::fit::node_affinity_matches(
                        std::slice::from_ref(r),
                        std::slice::from_ref(&level.name_field),
                        &node.name,
                        &node.labels,
                    )
                    && crate::fit::volumes_match(&grp.volumes.volume_alts, &node.labels)
            })
            .collect();
        grp.state.node_ok[l] = ok;
    }
    grp.state.node_ok[l][n]
}

/// Whether `tols` tolerate `taints` (PreferNoSchedule ones only with `tolerate_prefer`).
fn tolerated(tols: &[Toleration], taints: &[Taint], tolerate_prefer: bool) -> bool {
    pod::untolerated_taint_with(tols, taints, !tolerate_prefer).is_none()
}
