//! The journal that makes a query reversible: every change to the context's mutable state is
//! recorded and undone when the query ends, so one context answers many queries.

use super::SchedulingContext;
use super::ids::{CounterIx, InverseIx, NodeIx, PodIx};

/// One reversible change to the mutable scheduling state (see [`SchedulingContext`]): every
/// query records what it changes and puts it back when it ends, so the context serves the next
/// query without being rebuilt.
pub(super) enum Undo {
    /// Pod `pod`'s requests were added to node `node`.
    NodeUsed { node: NodeIx, pod: PodIx },
    /// Node `node`'s host ports were extended from `len` entries.
    NodePorts { node: NodeIx, len: usize },
    /// `delta` pods were counted in counter `counter`, domain `domain`.
    Count { counter: CounterIx, domain: u32, delta: i64 },
    /// `delta` pods holding inverse term `inverse` were counted in domain `domain`.
    Block { inverse: InverseIx, domain: u32, delta: i64 },
    /// Node `node` was taken out of the cluster for a what-if.
    Removed { node: NodeIx, old: bool },
}

impl SchedulingContext {
    /// Starts a query: remembers the pool limits it may use up.
    pub(super) fn begin(&mut self) {
        self.journal.clear();
        self.forget_claims();
        self.pool_limits = self.pools.iter().map(|p| (p.remaining.clone(), p.nodes_remaining)).collect();
    }

    /// Drops the query's claims and what is known of them.
    fn forget_claims(&mut self) {
        self.claims.clear();
        self.room.clear(self.res.names.len());
        for g in std::mem::take(&mut self.refusing) {
            self.groups[g].refused.clear();
        }
        self.forget_dearer();
    }

    /// Ends a query: puts back everything it changed.
    pub(super) fn rollback(&mut self) {
        while let Some(u) = self.journal.pop() {
            match u {
                Undo::NodeUsed { node, pod } => {
                    for (u, v) in self.nodes[node].used.iter_mut().zip(&self.pod_requests[pod]) {
                        *u -= v;
                    }
                }
                Undo::NodePorts { node, len } => self.nodes[node].ports.truncate(len),
                Undo::Count { counter, domain, delta } => self.counters[counter].add(domain, -delta),
                Undo::Block { inverse, domain, delta } => self.inverses[inverse].block(domain, -delta),
                Undo::Removed { node, old } => self.nodes[node].schedulable = old,
            }
        }
        self.forget_claims();
        for (pool, (remaining, nodes)) in self.pools.iter_mut().zip(std::mem::take(&mut self.pool_limits)) {
            pool.remaining = remaining;
            pool.nodes_remaining = nodes;
        }
        self.removed.clear();
    }
}
