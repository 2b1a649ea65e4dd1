//! Where each pod goes. [`run`](SchedulingContext::run) places a batch: pods largest first,
//! each tried at its group's levels ([`preferences`](super::preferences): most constrained
//! first, relaxed one preference at a time), and at each level
//! [`place`](SchedulingContext::place) tries the bins in order — existing nodes and in-flight
//! claims with room for the batch's smallest pod (`existing`, checked by `node_fit`), the
//! query's open claims the room index finds (`room`, `claims`, priced by `join_cost`, skipping
//! those `dearer` remembers), then a new claim of each NodePool by weight (`claims`, sized by
//! `packing`) — and commits the first that takes it. The pods left are retried until a full
//! pass places none of them (a pod may fit only once another pod of the batch is placed); those
//! still left are explained (`explain`).
//!
//! Each step asks a module about the parts it reads, borrowed from the context by the glue in
//! `scheduler.rs`: `node_checks(at).fits(n)` (`node_fit`), `claim_parts(at).fits(c)`,
//! `.commit(c, plan)` and `.open(p)` (`claims`), `join_parts(at).cost(c, &plan)` (`join_cost`),
//! `explain_parts(pi, g).explain()` (`explain`); `level(g, l)` builds a group's next level
//! (`preferences`).
//!
//! A preference per node never buys a node per pod. A pod that prefers something of each node on
//! its own (preferred pod affinity or anti-affinity, or a ScheduleAnyway spread, over
//! `kubernetes.io/hostname`; most Helm charts ship "prefer one replica per node") goes where
//! its preferences hold if the room is already there: existing nodes, in-flight claims, claims
//! this plan opened. When it is not, it takes room that is there at its most constrained level
//! that fits, having dropped per-node preferences only (in Karpenter's order); only a pod that
//! fits nowhere so opens a new claim, where its preferences hold. kube-scheduler treats these
//! terms as scores: among nodes with room it favours those that keep them and never leaves a
//! pod pending for them. Buying a node per replica for them (Karpenter's way) plans capacity
//! kube-scheduler fills differently — pods bound into other nodes' room before their own node is
//! up — and consolidation then takes back the nodes left idle: churn with an unchanged workload.
//! Consolidation's what-ifs run this same queue, so what provisioning plans is what
//! consolidation keeps. Zone-wide and node-affinity preferences still shape new capacity as
//! Karpenter's do: they choose where nodes go, not how many. Pods keep their largest-first
//! order: the pods a batch places first still open the claims the rest fill.

use std::collections::HashMap;

use kerf_api::resources::{CPU, MEMORY};

use super::SchedulingContext;
use super::claims::Bin;
use super::ids::{Attempt, ClaimIx, GroupIx, Idx, LevelIx, NodeIx, PodIx};
use super::join_cost::JoinCost;
use crate::model::{PodError, PreferencePolicy};

/// What one placement run did: pods (context indexes) placed on existing nodes, the reasons of
/// the pods it could not place (when asked to explain), and those pods.
#[derive(Default)]
pub(super) struct Run {
    pub(super) on_node: Vec<(PodIx, NodeIx)>,
    pub(super) errors: Vec<(PodIx, PodError)>,
    pub(super) unplaced: Vec<PodIx>,
}

impl SchedulingContext {
    /// Places `pods` (context indexes), largest first, retrying the ones that did not fit until
    /// a full pass places none of them (a pod may fit only once another pod of the batch is
    /// placed). With `explain`, says why for each pod left.
    pub(super) fn run(&mut self, pods: &[PodIx], explain: bool) -> Run {
        let nres = self.res.names.len();
        self.query.claims.min_request = vec![i64::MAX; nres];
        for &pi in pods {
            for (m, v) in self.query.claims.min_request.iter_mut().zip(&self.pods.requests[pi]) {
                *m = (*m).min(*v);
            }
        }
        if pods.is_empty() {
            // Nothing to place (a what-if whose nodes hold only pods that stay): no sentinel
            // left to overflow the room checks below.
            self.query.claims.min_request.fill(0);
        }
        // Nodes that cannot take even the smallest of these pods are never tried (nodes only
        // fill up during a run), so a run costs what it places, not the cluster's size.
        self.query.roomy.clear();
        for (n, node) in self.nodes.iter_enumerated() {
            let room =
                self.query.claims.min_request.iter().zip(&node.used).zip(&node.alloc).map(|((r, u), a)| (*r, *u, *a));
            if node.schedulable && crate::fit::short_resource(room).is_none() {
                self.query.roomy.push(n);
            }
        }
        let mut order: Vec<PodIx> = pods.to_vec();
        let (cpu, mem) = (self.res.index[CPU], self.res.index[MEMORY]);
        let last_from = self.input.pods.len().saturating_sub(self.input.placed_last);
        order.sort_by(|a, b| {
            let (ra, rb) = (&self.pods.requests[*a], &self.pods.requests[*b]);
            (a.ix() >= last_from)
                .cmp(&(b.ix() >= last_from))
                .then(rb[cpu].cmp(&ra[cpu]))
                .then(rb[mem].cmp(&ra[mem]))
                .then(a.cmp(b))
        });
        self.packing.begin(&order, &self.pods, &self.groups, self.res.names.len());
        let mut run = Run::default();
        let mut queue = order;
        let within_room = self.input.preference_policy == PreferencePolicy::RespectWithinRoom;
        loop {
            let before = queue.len();
            let mut left = Vec::new();
            for pi in queue {
                let bin = if within_room && self.groups[self.pods.group[pi]].prefers_per_node() {
                    self.place_preferring(pi)
                } else {
                    self.place_pod(pi)
                };
                self.record(&mut run, &mut left, pi, bin);
            }
            queue = left;
            if queue.is_empty() || (queue.len() == before && !self.packing.joins_by_worth) {
                break;
            }
            // Retries join claims whatever it costs them: a cost preference (see `join_cost`)
            // never leaves a pod pending.
            self.packing.joins_by_worth = false;
        }
        run.on_node.sort();
        if explain {
            let mut explained: HashMap<(GroupIx, Vec<i64>), PodError> = HashMap::new();
            for &pi in &queue {
                let g = self.pods.group[pi];
                // Identical pods (same group and requests) get the same explanation.
                let key = (g, self.pods.requests[pi].to_vec());
                let err = match explained.get(&key) {
                    Some(e) => PodError::clone(e),
                    None => {
                        let e = self.explain_parts(pi, g).explain();
                        explained.insert(key, e.clone());
                        e
                    }
                };
                run.errors.push((pi, err));
            }
            run.errors.sort_by_key(|(p, _)| *p);
        }
        run.unplaced = queue;
        run.unplaced.sort_unstable();
        run
    }

    /// Notes where pod `pi` went (`None`: nowhere yet, so it is tried again).
    fn record(&mut self, run: &mut Run, left: &mut Vec<PodIx>, pi: PodIx, bin: Option<Bin>) {
        match bin {
            Some(Bin::Node(n)) => {
                self.packing.placed(pi);
                run.on_node.push((pi, n));
            }
            Some(Bin::Claim(_)) => self.packing.placed(pi),
            None => left.push(pi),
        }
    }

    /// Tries pod `pi` at each level of its group, most constrained first, new claims included.
    pub(super) fn place_pod(&mut self, pi: PodIx) -> Option<Bin> {
        self.place_levels(pi, true)
    }

    /// A pod preferring something per node: on the room already there (existing nodes,
    /// in-flight and open claims) at its most constrained level that fits, else as any other
    /// pod — a new claim, where its preferences hold.
    fn place_preferring(&mut self, pi: PodIx) -> Option<Bin> {
        self.place_levels(pi, false).or_else(|| self.place_pod(pi))
    }

    /// Pod `pi` at each level of its group in turn: with `buy`, every level, new claims
    /// included; without, only on the room already there and only at the levels that dropped
    /// per-node preferences alone.
    fn place_levels(&mut self, pi: PodIx, buy: bool) -> Option<Bin> {
        let g = self.pods.group[pi];
        if self.groups[g].volumes.unresolvable.is_some() {
            return None;
        }
        let mut l = 0;
        loop {
            let level = self.level(g, LevelIx::new(l))?;
            let grp = &self.groups[g];
            if !buy && !grp.relaxes_only_per_node(&grp.state.levels[level].state) {
                return None;
            }
            if let Some(bin) = self.place(Attempt { pod: pi, group: g, level }, buy) {
                return Some(bin);
            }
            l += 1;
        }
    }

    /// Claim `c` never takes group `g`'s pods at its first level, in the running query.
    fn refuse(&mut self, g: GroupIx, c: ClaimIx) {
        let c = c.ix();
        let set = &mut self.groups[g].state.refused;
        if set.is_empty() {
            self.query.refusing.push(g);
        }
        if set.len() <= c / 64 {
            set.resize(c / 64 + 1, 0);
        }
        set[c / 64] |= 1 << (c % 64);
    }

    /// Tries every bin for the attempt's pod at its level, in order: existing nodes, in-flight
    /// claims, open claims, new claims (when it may `buy`). Commits the first that fits.
    pub(super) fn place(&mut self, at: Attempt, buy: bool) -> Option<Bin> {
        let (pi, g) = (at.pod, at.group);
        for j in 0..self.query.roomy.len() {
            let n = self.query.roomy[j];
            if self.node_checks(at).fits(n) {
                self.commit_node(pi, g, n);
                return Some(Bin::Node(n));
            }
        }
        // Open claims with room for the pod, in creation order, but those known never to take
        // this group's pods at its first level; one the pod would make dearer (see `join_cost`)
        // only when none takes it as it is.
        // Claims this group's pods found dearer, and nothing changed since, are skipped too.
        let mut i = 0;
        let mut dearer = None;
        let key = self.dearer.key(&self.packing, pi);
        let left = self.packing.shape_left(pi).unwrap_or(0);
        let slot = self.dearer.refresh(at, key, left, &self.groups[g], &self.topology);
        loop {
            let first_level = at.level.ix() == 0;
            let refused: &[u64] = if first_level { &self.groups[g].state.refused } else { &[] };
            let skip = [refused, self.dearer.claims(slot)];
            let Some(c) = self.query.claims.room.first_fit(i, &self.pods.requests[pi], skip).map(ClaimIx::new) else {
                break;
            };
            match self.claim_parts(at).fits(c) {
                Ok(plan) => match self.join_parts(at).cost(c, &plan) {
                    JoinCost::Free => {
                        self.claim_parts(at).commit(c, plan);
                        return Some(Bin::Claim(c));
                    }
                    JoinCost::Worth if dearer.is_none() => dearer = Some((c, plan)),
                    JoinCost::Worth => {}
                    JoinCost::Dearer(worth_at) => {
                        // The shape's worth may have been computed again during this scan.
                        let key = self.dearer.key(&self.packing, pi);
                        let left = self.packing.shape_left(pi).unwrap_or(0);
                        self.dearer.note(slot, key, left, c, worth_at);
                    }
                },
                Err(true) if first_level => self.refuse(g, c),
                Err(_) => {}
            }
            i = c.ix() + 1;
        }
        if let Some((c, plan)) = dearer {
            self.claim_parts(at).commit(c, plan);
            return Some(Bin::Claim(c));
        }
        if !buy {
            return None;
        }
        // A new claim, NodePools by weight.
        for p in self.pools.all.indices() {
            if let Some(c) = self.claim_parts(at).open(p) {
                return Some(Bin::Claim(c));
            }
        }
        None
    }

    /// Pod `pi` of group `g` goes on existing node `n`: the node takes its requests and host
    /// ports, and the pod counts in the node's topology domains.
    fn commit_node(&mut self, pi: PodIx, g: GroupIx, n: NodeIx) {
        self.nodes[n].take(n, pi, &self.pods.requests[pi], &self.groups[g].ports, &mut self.query.journal);
        self.count_pod(n, pi, 1);
    }
}
